"""The estimate never beats physics: for random systems, models and concurrencies, tokens/s/user is
at most the aggregate HBM bandwidth over the bytes a step must read, at most the aggregate peak
compute over the step's FLOPs, and a step on several dies takes at least a die-to-die latency per
layer."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_models.perf.estimate import FitError, estimate
from sim_models.perf.model_desc import load_model
from sim_models.perf.system import load_system

MODELS = {n: load_model(n)
          for n in ("gpt-oss-120b", "deepseek-r1", "kimi-k2.5", "tiny-llama", "tiny-mixtral")}
BASE = {n: load_system(n) for n in ("jalapeno-b0-like", "poblano-die-2x2", "poblano-tile")}


@st.composite
def systems(draw):
    s = BASE[draw(st.sampled_from(sorted(BASE)))]
    f = lambda: draw(st.floats(0.1, 10))  # noqa: E731
    die = dataclasses.replace(s.die, hbm_bytes_per_s=s.die.hbm_bytes_per_s * f(),
                              hbm_bytes=s.die.hbm_bytes * f(), clock_hz=s.die.clock_hz * f(),
                              peak_flops=s.die.peak_flops * f(),
                              mac_efficiency=draw(st.floats(0.05, 1)),
                              hbm_efficiency=draw(st.floats(0.05, 1)))
    links = dataclasses.replace(s.links, scale_up_latency_ns=s.links.scale_up_latency_ns * f(),
                                scale_up_bytes_per_s=s.links.scale_up_bytes_per_s * f(),
                                max_dies=draw(st.sampled_from([1, 2, 8, 64, 2048])))
    return dataclasses.replace(s, die=die, links=links)


@settings(derandomize=True, deadline=None, max_examples=60)
@given(system=systems(), name=st.sampled_from(sorted(MODELS)), concurrency=st.integers(1, 512),
       isl=st.integers(1, 16384), osl=st.integers(1, 2048), objective=st.sampled_from(["user", "die"]))
def test_bounds_hold(system, name, concurrency, isl, osl, objective):
    model = MODELS[name]
    try:
        p = estimate(model, system, isl, osl, concurrency, objective)
    except FitError:
        return
    die, dies = system.die, p.dies
    context = isl + osl // 2
    # memory: a step reads at least one token's active weights and every user's KV
    active_bytes = (model.active_params() - model.embedding_params()) * die.weight_bits / 8
    kv = concurrency * model.kv_bytes_read(context, die.kv_bytes_per_element)
    assert p.tokens_per_s_user <= dies * die.hbm_bytes_per_s / (active_bytes + kv) * (1 + 1e-9)
    # compute: every user's token costs its FLOPs
    flops = concurrency * model.flops_per_token(context)
    assert p.tokens_per_s_user <= dies * die.flops / flops * (1 + 1e-9)
    # die-to-die latency: a layer split over dies waits for a link at least once
    if p.tp > 1:
        assert p.decode_s >= model.layers * system.links.scale_up_latency_ns * 1e-9
    assert p.tokens_per_s_die * dies <= concurrency * p.tokens_per_s_user * (1 + 1e-9)
    assert p.bound in p.split and p.power_w > 0


def test_more_bandwidth_never_slows_a_memory_bound_point():
    s = BASE["jalapeno-b0-like"]
    fast = dataclasses.replace(s, die=dataclasses.replace(s.die, hbm_bytes_per_s=2 * s.die.hbm_bytes_per_s))
    m = MODELS["gpt-oss-120b"]
    slow_p, fast_p = estimate(m, s, 8192, 1024, 1), estimate(m, fast, 8192, 1024, 1)
    assert slow_p.bound == "hbm"
    assert fast_p.tokens_per_s_user > slow_p.tokens_per_s_user


def test_a_model_that_does_not_fit():
    with pytest.raises(FitError, match="does not fit poblano-tile"):
        estimate(MODELS["deepseek-r1"], BASE["poblano-tile"], 8192, 1024, 1)
