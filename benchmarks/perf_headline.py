"""The performance model's headline: the three seed-benchmark models at 8k input / 1k output tokens
on the ``jalapeno-b0-like`` system, beside the seed chip's published figures, and what the model
says it would take to match them.

For DeepSeek-R1, GPT-OSS-120B and Kimi-K2.5 (``models/``): the predicted tokens/s/user at
concurrency 1 (objective ``user``: the best mapping for one user) with its bound and dies, and
the tokens/s per MW at peak throughput (objective ``die``, concurrency 1 to 1,024: the best). Then
the sensitivity to the two figures of the system that are assumptions and that bound the
concurrency-1 point: the HBM bandwidth per die and the die-to-die latency. For each model, the
value of each at which the prediction falls to the seed's claim (the other kept), found by
bisection: a prediction far above the claim means the assumption, not the design, sets it.

Run: ``.venv/bin/python -m benchmarks.perf_headline`` (seconds); writes
``benchmarks/results/perf_headline.md`` and ``.json``.
"""

import dataclasses
import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

MODELS = (("deepseek-r1", "DeepSeek-R1", 700, ">700"), ("gpt-oss-120b", "GPT-OSS-120B", 1400, "~1,400"),
          ("kimi-k2.5", "Kimi-K2.5", 1400, "~1,400"))
"""(name, label, the seed's tokens/s/user at concurrency 1, as published)."""
ISL, OSL = 8192, 1024
PEAK = (1, 4, 16, 64, 256, 1024)


def _with(system, **changes):
    die = {k: v for k, v in changes.items() if k in {f.name for f in dataclasses.fields(system.die)}}
    links = {k: v for k, v in changes.items() if k not in die}
    return dataclasses.replace(system, die=dataclasses.replace(system.die, **die),
                               links=dataclasses.replace(system.links, **links))


def _user_rate(model, system):
    from sim_models.perf.estimate import estimate

    return estimate(model, system, ISL, OSL, 1).tokens_per_s_user


def _matching(model, system, field, target, low, high):
    """The value of ``field`` in [low, high] at which tokens/s/user at concurrency 1 equals
    ``target`` (bisection in log space; the rate falls as ``field`` goes from ``low`` to ``high``
    for a latency and rises for a bandwidth). None when the target is outside the range."""
    def rate(v):
        return _user_rate(model, _with(system, **{field: v}))
    lo_rate, hi_rate = rate(low), rate(high)
    if not min(lo_rate, hi_rate) <= target <= max(lo_rate, hi_rate):
        return None
    for _ in range(40):
        mid = (low * high) ** 0.5
        if (rate(mid) >= target) == (lo_rate >= target):
            low = mid
        else:
            high = mid
    return (low * high) ** 0.5


def rows():
    from sim_models.perf.estimate import estimate
    from sim_models.perf.model_desc import load_model
    from sim_models.perf.system import load_system

    system = load_system("jalapeno-b0-like")
    out = []
    for name, label, claim, claim_text in MODELS:
        model = load_model(name)
        user = estimate(model, system, ISL, OSL, 1)
        peak = max((estimate(model, system, ISL, OSL, c, "die") for c in PEAK),
                   key=lambda p: p.tokens_per_s_mw)
        out.append({
            "model": name, "label": label, "claim": claim, "claim_text": claim_text,
            "tokens_per_s_user": user.tokens_per_s_user, "bound": user.bound, "dies": user.dies,
            "mapping": user.mapping, "peak_tokens_per_s_mw": peak.tokens_per_s_mw,
            "peak_concurrency": peak.concurrency, "peak_dies": peak.dies, "peak_bound": peak.bound,
            "hbm_for_claim": _matching(model, system, "hbm_bytes_per_s", claim, 1e11, 1e14),
            "latency_for_claim": _matching(model, system, "scale_up_latency_ns", claim, 1.0, 1e5),
        })
    return system, out


def _fmt(value, scale, unit):
    return "out of range" if value is None else f"{value / scale:,.3g} {unit}"


def table_text(table):
    """The Markdown table of :func:`rows`."""
    lines = ["| model | tokens/s/user, concurrency 1 (seed's claim) | bound, dies | tokens/s per MW at peak "
             "(concurrency, dies, bound) | HBM per die at which it falls to the claim | die-to-die latency "
             "at which it does |", "|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['label']} | {r['tokens_per_s_user']:,.0f} ({r['claim_text']}) | {r['bound']}, "
                     f"{r['dies']} | {r['peak_tokens_per_s_mw'] / 1e6:,.2f} M ({r['peak_concurrency']}, "
                     f"{r['peak_dies']}, {r['peak_bound']}) | {_fmt(r['hbm_for_claim'], 1e12, 'TB/s')} | "
                     f"{_fmt(r['latency_for_claim'], 1e3, 'us')} |")
    return "\n".join(lines)


def main(argv=None):
    system, table = rows()
    text = table_text(table)
    print(text)
    d = system.die
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "perf_headline.json").write_text(json.dumps({"system": system.name, "isl": ISL, "osl": OSL,
                                                            "rows": table}, indent=2) + "\n")
    (RESULTS / "perf_headline.md").write_text(f"""# Performance model: the headline, and what it rests on

Computed by `.venv/bin/python -m benchmarks.perf_headline` (the module's docstring says how) with
the performance model (`docs/perf_model.md`) on `{system.name}`, {ISL:,} input and {OSL:,} output
tokens. **Predictions, not measurements**: the system's HBM ({d.hbm_bytes_per_s / 1e12:g} TB/s per
die), die-to-die latency ({system.links.scale_up_latency_ns:g} ns), efficiencies and static power
are assumptions (`sim_models/perf/systems/{system.name}.toml`); the model has no software overhead,
no uneven expert load and no overlap of communication with compute.

{text}

The last two columns are the sensitivity: the HBM bandwidth per die, or the die-to-die latency,
at which the concurrency-1 prediction comes down to the seed's figure with everything else kept
("out of range": not between 0.1 and 100 TB/s, or 1 ns and 100 us). The mapping search may take
more dies as either gets worse, which is why the HBM figure can fall far below today's parts. Peak
throughput per MW is at the largest concurrency tried ({PEAK[-1]:,}) for all three: the model has no
batch-size limit but the HBM capacity.
""")
    return 0


if __name__ == "__main__":
    sys.exit(main())
