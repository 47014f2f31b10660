"""KV-cache SRAM controller: paged, banked, SECDED-protected on-chip token-record storage."""
