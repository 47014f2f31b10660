"""Golden models of the KV-cache controller: the SECDED code and the paged store."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_models.ecc import CORRECTED, OK, UNCORRECTABLE, SecdedCode, check_bits_for, hsiao_columns
from sim_models.kv_cache import STATUSES, InvariantError, KvCacheModel, KvConfig

SETTINGS = settings(derandomize=True, deadline=None, max_examples=150)
WIDTHS = [1, 4, 8, 16, 32, 64]


# -- SECDED code ----------------------------------------------------------------------------------
@pytest.mark.parametrize("k, r", [(1, 3), (4, 4), (8, 5), (16, 6), (32, 7), (64, 8), (128, 9)])
def test_check_bits(k, r):
    assert check_bits_for(k) == r


@pytest.mark.parametrize("k", WIDTHS + [128])
def test_columns_are_hsiao(k):
    r = check_bits_for(k)
    columns = hsiao_columns(k)
    assert len(set(columns)) == k
    assert all(bin(c).count("1") % 2 == 1 and bin(c).count("1") >= 3 and c < (1 << r) for c in columns)
    rows = [sum((c >> j) & 1 for c in columns) for j in range(r)]
    assert max(rows) - min(rows) <= 1                         # balanced XOR trees
    # minimal total weight: no weight-5 column while a weight-3 one is unused
    if any(bin(c).count("1") > 3 for c in columns):
        assert sum(1 for c in columns if bin(c).count("1") == 3) == r * (r - 1) * (r - 2) // 6


@pytest.mark.parametrize("k", [1, 4, 8, 16])
def test_every_single_and_double_error_exhaustively(k):
    code = SecdedCode(k)
    for data in sorted({0, (1 << k) - 1, 0x5A5A & ((1 << k) - 1), 1}):
        word = code.encode(data)
        assert code.decode(word) == (data, OK)
        for i in range(code.width):
            assert code.decode(word ^ (1 << i)) == (data, CORRECTED)
            for j in range(i + 1, code.width):
                damaged = word ^ (1 << i) ^ (1 << j)
                assert code.decode(damaged) == (damaged & ((1 << k) - 1), UNCORRECTABLE)


@SETTINGS
@given(st.sampled_from(WIDTHS), st.data())
def test_single_and_double_errors(k, draw):
    code = SecdedCode(k)
    data = draw.draw(st.integers(0, (1 << k) - 1))
    i = draw.draw(st.integers(0, code.width - 1))
    j = draw.draw(st.integers(0, code.width - 1).filter(lambda x: x != i))
    word = code.encode(data)
    assert word & ((1 << k) - 1) == data                        # systematic
    assert code.decode(word ^ (1 << i)) == (data, CORRECTED)
    got, status = code.decode(word ^ (1 << i) ^ (1 << j))
    assert status == UNCORRECTABLE
    assert got == (word ^ (1 << i) ^ (1 << j)) & ((1 << k) - 1)   # stored data passes through


def test_decode_rejects_wide_words():
    code = SecdedCode(8)
    with pytest.raises(ValueError):
        code.decode(1 << code.width)
    with pytest.raises(ValueError):
        code.encode(256)


# -- configuration ----------------------------------------------------------------------------------
@pytest.mark.parametrize("params, error", [
    (dict(page_tokens=12), ValueError), (dict(banks=3), ValueError), (dict(banks=32), ValueError),
    (dict(pages=1), ValueError), (dict(max_pages_per_seq=65), ValueError), (dict(seqs=0), ValueError),
    (dict(token_bits=8.0), TypeError), (dict(counter_bits=True), TypeError),
])
def test_config_validation(params, error):
    with pytest.raises(error):
        KvConfig(**params)


# -- directed semantics -------------------------------------------------------------------------------
SMALL = dict(pages=6, page_tokens=4, token_bits=16, seqs=4, max_pages_per_seq=3, banks=2, counter_bits=3)


def _model(**overrides):
    return KvCacheModel(**{**SMALL, **overrides})


def _fill(m, seq, values):
    for v in values:
        assert m.append(seq, v)["status"] == "ok"


def test_error_order():
    m = _model()
    assert m.open(4) == {"status": "bad_seq"}
    assert m.append(0, 1) == {"status": "not_live"}
    assert m.fork(0, 9) == {"status": "bad_seq"}                # bad id before not_live
    assert m.read(9, 0, 100) == {"status": "bad_seq"}
    m.open(0)
    assert m.fork(0, 0) == {"status": "live"}
    assert m.read(0, 0, 0) == {"status": "ok", "data": [], "poisoned": [], "corrected": []}
    assert m.read(0, 0, 1) == {"status": "out_of_range"}
    assert m.truncate(0, 1) == {"status": "out_of_range"}
    assert m.inject(0, 0, [1]) == {"status": "out_of_range"}
    _fill(m, 0, range(12))
    assert m.append(0, 1) == {"status": "seq_full"}             # seq_full before no_space
    m.open(1)
    _fill(m, 1, range(12))
    assert m.stat()["free_pages"] == 0
    m.open(2)
    assert m.append(2, 5) == {"status": "no_space"}
    assert m.read(0, 0, 12)["data"] == list(range(12))          # intact after no_space
    m.check_invariant()


def test_copy_on_write_after_fork():
    m = _model()
    m.open(0)
    _fill(m, 0, [10, 11, 12, 13, 14, 15])                       # pages: full + half
    assert m.fork(0, 1)["status"] == "ok"
    assert m.stat()["free_pages"] == 4                          # shared, nothing copied yet
    assert m.append(1, 99) == {"status": "ok", "pos": 6}
    assert m.events["copy_on_write"] == 1
    assert m.stat()["free_pages"] == 3
    assert m.append(0, 77) == {"status": "ok", "pos": 6}        # its tail is no longer shared
    assert m.events["copy_on_write"] == 1
    assert m.read(0, 0, 7)["data"] == [10, 11, 12, 13, 14, 15, 77]
    assert m.read(1, 0, 7)["data"] == [10, 11, 12, 13, 14, 15, 99]
    m.check_invariant()


def test_append_at_page_boundary_of_shared_sequence_allocates_without_copy():
    m = _model()
    m.open(0)
    _fill(m, 0, range(4))
    m.fork(0, 1)
    m.append(1, 5)
    assert m.events["copy_on_write"] == 0 and m.refcount.count(2) == 1


def test_truncate_into_shared_page_then_append():
    m = _model()
    m.open(0)
    _fill(m, 0, range(8))
    m.fork(0, 1)
    assert m.truncate(1, 5) == {"status": "ok"}                 # into the second, shared, page
    assert m.stat()["free_pages"] == 4
    m.append(1, 50)
    assert m.events["copy_on_write"] == 1
    assert m.read(1, 0, 6)["data"] == [0, 1, 2, 3, 4, 50]
    assert m.read(0, 0, 8)["data"] == list(range(8))
    assert m.truncate(0, 0) == {"status": "ok"}
    assert m.read(0, 0, 1) == {"status": "out_of_range"}        # old data unreachable
    m.check_invariant()


def test_fork_chain_and_close_release_every_page():
    m = _model(seqs=4)
    m.open(0)
    _fill(m, 0, range(6))
    for src, dst in [(0, 1), (1, 2), (2, 3)]:
        assert m.fork(src, dst)["status"] == "ok"
    assert sorted(c for c in m.refcount if c) == [4, 4]
    for seq in (2, 0, 3):
        m.close(seq)
        m.check_invariant()
    assert m.read(1, 0, 6)["data"] == list(range(6))
    m.close(1)
    assert m.stat() == {"status": "ok", "free_pages": 6, "live_seqs": 0, "ecc_corrected": 0,
                        "ecc_uncorrectable": 0}
    assert m.open(1) == {"status": "ok"}                        # slot reuse: empty again
    assert m.read(1, 0, 1) == {"status": "out_of_range"}


def test_injected_errors_are_shared_copied_and_overwritten():
    m = _model()
    m.open(0)
    _fill(m, 0, [1, 2, 3])
    m.fork(0, 1)
    assert m.inject(1, 1, [0, 20]) == {"status": "ok"}         # double error on the shared page
    assert m.inject(0, 2, [19]) == {"status": "ok"}            # check bit 3
    assert m.read(0, 0, 3) == {"status": "ok", "data": [1, 2 ^ 1, 3], "poisoned": [1],
                               "corrected": [2]}
    m.append(1, 4)                                              # copy-on-write copies raw codewords
    assert m.read(1, 0, 4)["poisoned"] == [1]
    m.truncate(1, 1)
    m.append(1, 9)                                              # slot rewritten: clean again
    assert m.read(1, 0, 2) == {"status": "ok", "data": [1, 9], "poisoned": [], "corrected": []}
    assert m.stat()["ecc_corrected"] == 2 and m.stat()["ecc_uncorrectable"] == 2
    with pytest.raises(ValueError):
        m.inject(0, 0, [16 + 6])


def test_counters_saturate():
    m = _model(counter_bits=2)
    m.open(0)
    _fill(m, 0, [5])
    m.inject(0, 0, [3])
    for _ in range(5):
        m.read(0, 0, 1)
    assert m.stat()["ecc_corrected"] == 3


def test_invariant_catches_corruption():
    m = _model()
    m.open(0)
    _fill(m, 0, [1])
    m.refcount[m.page_list[0][0]] = 2
    with pytest.raises(InvariantError):
        m.check_invariant()


# -- random traces against a logical (page-free) reference ---------------------------------------------
def _op(seqs, max_len, bits):
    seq = st.integers(0, seqs + 1)
    length = st.integers(0, max_len + 2)
    return st.one_of(
        st.fixed_dictionaries({"op": st.just("open"), "seq": seq}),
        st.fixed_dictionaries({"op": st.just("append"), "seq": seq, "data": st.integers(0, (1 << bits) - 1)}),
        st.fixed_dictionaries({"op": st.just("append"), "seq": seq, "data": st.integers(0, (1 << bits) - 1)}),
        st.fixed_dictionaries({"op": st.just("read"), "seq": seq, "start": length, "count": length}),
        st.fixed_dictionaries({"op": st.just("fork"), "src": seq, "dst": seq}),
        st.fixed_dictionaries({"op": st.just("truncate"), "seq": seq, "length": length}),
        st.fixed_dictionaries({"op": st.just("close"), "seq": seq}),
        st.fixed_dictionaries({"op": st.just("stat")}),
    )


class LogicalKv:
    """Sequences as plain lists: what every read must return, whatever the paging does."""

    def __init__(self, c):
        self.c = c
        self.seqs = {}

    def expect(self, op, model):
        c, name = self.c, op["op"]
        ids = [op[k] for k in ("seq", "src", "dst") if k in op]
        if name == "stat":
            return {"status": "ok"}
        if any(i >= c.seqs for i in ids):
            return {"status": "bad_seq"}
        first = op.get("seq", op.get("src"))
        if name == "open":
            if first in self.seqs:
                return {"status": "live"}
            self.seqs[first] = []
            return {"status": "ok"}
        if first not in self.seqs:
            return {"status": "not_live"}
        records = self.seqs[first]
        if name == "append":
            if len(records) == c.max_len:
                return {"status": "seq_full"}
            if model.free_pages == 0 and (len(records) % c.page_tokens == 0
                                          or model.refcount[model.page_list[first][-1]] > 1):
                return {"status": "no_space"}
            records.append(op["data"])
            return {"status": "ok", "pos": len(records) - 1}
        if name == "read":
            if op["start"] + op["count"] > len(records):
                return {"status": "out_of_range"}
            return {"status": "ok", "data": records[op["start"]:op["start"] + op["count"]],
                    "poisoned": [], "corrected": []}
        if name == "fork":
            if op["dst"] in self.seqs:
                return {"status": "live"}
            self.seqs[op["dst"]] = list(records)
            return {"status": "ok"}
        if name == "truncate":
            if op["length"] > len(records):
                return {"status": "out_of_range"}
            del records[op["length"]:]
            return {"status": "ok"}
        del self.seqs[first]
        return {"status": "ok"}


@SETTINGS
@given(st.data())
def test_random_traces_match_logical_reference(draw):
    params = draw.draw(st.sampled_from([SMALL, dict(SMALL, page_tokens=1, banks=1, pages=4),
                                        dict(SMALL, pages=3, max_pages_per_seq=2)]))
    c = KvConfig(**params)
    model, logical = KvCacheModel(c), LogicalKv(c)
    for op in draw.draw(st.lists(_op(c.seqs, c.max_len, c.token_bits), min_size=20, max_size=120)):
        expected = logical.expect(op, model)
        reply = model.apply(op)
        model.check_invariant()
        assert reply["status"] in STATUSES
        if op["op"] == "stat":
            assert reply["live_seqs"] == len(logical.seqs)
            continue
        assert reply == expected, op


def test_apply_rejects_unknown_operations():
    with pytest.raises(ValueError):
        _model().apply({"op": "flush"})
