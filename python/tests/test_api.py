"""The package's accessors: facts about schedules that hold independently of the command."""

import numpy as np
import pytest

import pipetab


def test_generated_table_holds_every_pass_once():
    table = pipetab.generate("1f1b", 4, 8)
    assert (table.devices, table.stages, table.microbatches, table.pipelines) == (4, 4, 8, 1)
    ops = table.ops()
    assert len(table) == table.num_ops == 2 * 4 * 8
    for kind in ("F", "B"):
        pairs = {(m, s) for k, m, s in zip(ops["kind"], ops["microbatch"], ops["stage"]) if k == kind}
        assert pairs == {(m, s) for m in range(8) for s in range(4)}
    # 1F1B places stage s on device s.
    assert np.array_equal(ops["device"], ops["stage"])
    assert table.params == {"devices": 4, "microbatches": 8, "chunks": 1, "waves": 1}


def test_idealized_timing_of_gpipe_matches_its_closed_form():
    # GPipe with F=1, B=2: makespan (S − 1)(F + B) + M(F + B) (Huang et al. 2019).
    s, m = 4, 8
    table = pipetab.generate("gpipe", s, m)
    timing = table.timing("F=1,B=2")
    assert timing["end"].max() == pytest.approx((s - 1 + m) * 3)
    assert np.all(timing["end"] - timing["start"] > 0)
    frame = table.to_pandas()
    assert list(frame["start"]) == list(timing["start"])


def test_analysis_arrays_agree_with_scalars():
    a = pipetab.analyze("interleaved", 4, 8, chunks=2)
    table = a.table
    assert isinstance(table["busy"], np.ndarray) and table["busy"].shape == (4,)
    assert table["busy"] + table["idle"] == pytest.approx(np.full(4, table["makespan"]))
    assert table["peak_activation"].max() == table["peak_activation_max"]
    assert a.formula["bubble_ratio"] == pytest.approx(table["bubble_ratio"])
    assert a.params["chunks"] == 2 and a.schedule == "interleaved"


def test_simulated_ops_run_one_at_a_time_per_device():
    sim = pipetab.simulate("zb-h1", 4, 8, model="gpt3-1.3b", system="dgx-a100")
    frame = sim.to_pandas()
    assert len(frame) == sim.table.num_ops
    per_device = sim.per_device()
    for device, ops in frame.groupby("device"):
        ops = ops.sort_values("position")
        assert np.all(ops["start"].to_numpy()[1:] >= ops["end"].to_numpy()[:-1] - 1e-12)
        busy = (ops["end"] - ops["start"]).sum()
        assert busy == pytest.approx(per_device["compute_s"][device], rel=1e-9)
    assert frame["end"].max() == pytest.approx(sim.to_dict()["pipeline_end_s"])
    assert sim.runtime_s >= frame["end"].max()


def test_model_and_system_dicts_equal_their_presets():
    model = pipetab.preset("model", "gpt3-1.3b")
    system = pipetab.preset("system", "dgx-a100")
    by_name = pipetab.simulate("1f1b", 4, 8, model="gpt3-1.3b", system="dgx-a100")
    by_dict = pipetab.simulate("1f1b", 4, 8, model=model, system=system)
    assert by_dict.to_dict() == by_name.to_dict()
    # A changed value changes the result: twice the layers take longer.
    model["transformer"]["layers"] *= 2
    assert pipetab.simulate("1f1b", 4, 8, model=model, system=system).runtime_s > by_name.runtime_s


def test_mtp_module_from_a_model_dict_and_its_layout():
    # One MTP module (mtp_layers) costs the last stage a layer and a second output layer; a layout
    # with `m` places it, and a layout without it is refused with the count.
    model = pipetab.preset("model", "gpt3-1.3b")
    base = pipetab.simulate("1f1b", 4, 8, model=model, system="dgx-a100")
    model["transformer"]["mtp_layers"] = 1
    with_mtp = pipetab.simulate("1f1b", 4, 8, model=model, system="dgx-a100")
    assert with_mtp.runtime_s > base.runtime_s
    placed = pipetab.simulate("1f1b", 4, 8, model=model, system="dgx-a100",
                              pipeline_layout="Et*7|t*7|t*7|t*3mL")
    assert placed.runtime_s != with_mtp.runtime_s
    with pytest.raises(pipetab.ParamError, match=r"0 MTP layers \(m\), and the model has 1"):
        pipetab.simulate("1f1b", 4, 8, model=model, system="dgx-a100",
                         pipeline_layout="Et*6|t*6|t*6|t*6L")


def test_costs_as_dict_equal_costs_as_text():
    text = pipetab.analyze("zb-h1", costs="F=1,B=3,I=1").to_dict()
    assert pipetab.analyze("zb-h1", costs={"F": 1, "B": 3, "I": 1}).to_dict() == text


def test_presets_are_listed():
    assert "gpt3-13b" in pipetab.model_presets()
    assert "dgx-h100" in pipetab.system_presets()
    names = [s["name"] for s in pipetab.list_schedules()]
    assert {"1f1b", "zb-v", "chimera"} <= set(names)


def test_save_and_load_round_trip(tmp_path):
    table = pipetab.generate("interleaved", 4, 8, chunks=2)
    for name in ("t.json", "t.csv"):
        table.save(tmp_path / name)
        loaded = pipetab.load_table(tmp_path / name)
        assert loaded.same_schedule(table)
        assert loaded.path == str(tmp_path / name)
    assert pipetab.load_table(tmp_path / "t.json").params == table.params


def test_compare_ranks_and_frame():
    comparison = pipetab.compare(["gpipe", "1f1b"], devices=4, microbatches=8)
    systems = [c["system"] for c in comparison.comparisons]
    assert systems == ["compute-bound", "balanced", "network-bound"]
    frame = comparison.to_pandas()
    assert len(frame) == 6
    # GPipe and 1F1B have the same bubble: the same table-level rank.
    for _, group in frame.groupby("system"):
        assert group["rank.table"].nunique() == 1
    # Memory beside the runtime: the largest device's peak, the usable capacity, whether it fits.
    for _, row in frame.iterrows():
        assert row["simulation.peak_memory_max_bytes"] > 0
        assert row["simulation.fits"] == (row["simulation.peak_memory_max_bytes"]
                                          <= row["simulation.memory_capacity_bytes"])


def test_tune_best_fits_its_limit():
    result = pipetab.tune(4, 8, memory_limit=3)
    assert result.best["fits"] and result.best["peak_activation"] <= 3
    runtimes = [c["runtime_s"] for c in result.candidates if c["fits"]]
    assert result.best["runtime_s"] == min(runtimes)
    frame = result.to_pandas()
    assert len(frame) == len(result.candidates)
    best = result.best_table()
    peaks = pipetab.analyze(best).table["peak_activation"]
    assert peaks.max() <= 3


def test_tune_with_nothing_fitting_returns_no_best():
    result = pipetab.tune(4, 8, memory_limit="1MB")
    assert result.best is None and result.best_table() is None


def test_plan_ranks_fastest_first():
    result = pipetab.plan("gpt3-13b", "dgx-a100", gpus=16, global_batch=32, top=4)
    runtimes = [entry["runtime_s"] for entry in result.top]
    assert runtimes == sorted(runtimes)
    for entry in result.top:
        layout = entry["layout"]
        assert layout["tensor_parallel"] * layout["pipeline_parallel"] * layout["data_parallel"] == 16
    table = result.table(1)
    assert table.devices == result.top[0]["layout"]["pipeline_parallel"]
    with pytest.raises(pipetab.Error):
        result.table(5)


def test_errors_are_value_errors():
    assert issubclass(pipetab.Error, ValueError)
    assert issubclass(pipetab.ParamError, pipetab.Error)
    assert issubclass(pipetab.ParseError, pipetab.Error)
    assert pipetab.Error.__module__ == "pipetab"


def test_nccl_buffsize_decides_whether_torchtitans_example_runs():
    # NCCL's point-to-point semantics (docs/pytorch.md): gpt3-1.3b's 8 MiB activations do not fit
    # NCCL's default 4 MiB buffer, so the example's crossing sends wait for receives posted after
    # them; a 16 MiB buffer sends them eagerly and the file runs, as with `--nccl-buffsize`.
    from conftest import SOURCE_DIR

    example = SOURCE_DIR / "tests/data/torchtitan/example.csv"
    with pytest.raises(pipetab.Error, match=r"larger than NCCL's 4 MiB buffer"):
        pipetab.simulate(example, model="gpt3-1.3b", system="dgx-a100")
    run = pipetab.simulate(example, model="gpt3-1.3b", system="dgx-a100", nccl_buffsize=16 << 20)
    assert run.runtime_s > 0
    with pytest.raises(pipetab.Error, match="nccl_buffsize"):
        pipetab.simulate(example, model="gpt3-1.3b", system="dgx-a100", nccl_buffsize=-1)


def test_every_simulated_runtime_has_its_error_bar():
    # A dense run's interval brackets its prediction, its summary says where it comes from, and a
    # plan's rows carry theirs; a mixture of experts' runs come from another regime.
    s = pipetab.simulate("1f1b", 4, 8, model="llama3.1-8b", system="dgx-h100")
    bar = s.to_dict()["runtime_interval_s"]
    assert bar["low"] < s.runtime_s < bar["high"] and bar["level"] == 0.9
    assert bar["regime"] == "dense" and bar["runs"] >= 5
    assert f"from {bar['runs']} published dense runs" in repr(s)
    moe = pipetab.simulate("1f1b", 2, 8, model="qwen3-30b-a3b", system="dgx-h100", ep=4, dp=4)
    assert moe.to_dict()["runtime_interval_s"]["regime"] == "moe"
    # A plan's rows: each layout's range brackets it, a context-parallel one's from that regime's
    # runs (on three presets since B31, Llama 3.1 405B with CP 2 on B200s).
    rows = pipetab.plan(model="llama3.1-8b", system="dgx-h100", gpus=8, global_batch=16, top=20).to_pandas()
    dense = rows[rows["context_parallel"] == 1]
    assert len(dense) and (dense["runtime_low_s"] < dense["runtime_s"]).all()
    assert (dense["runtime_s"] < dense["runtime_high_s"]).all()
    cp = rows[rows["context_parallel"] > 1]
    assert len(cp) and (cp["runtime_low_s"] < cp["runtime_s"]).all() and (cp["runtime_s"] < cp["runtime_high_s"]).all()
    assert set(rows["flop_count"]) == {"palm"}


def test_a_named_stack_is_a_keyword_and_says_what_it_ran():
    # torchtitan's stack runs SDPA's flash backend (FlashAttention-2's kernels); on an H100 the
    # same layer under Transformer Engine's cuDNN kernel runs faster (data/gpu/h100-sxm-attention.csv).
    titan = pipetab.simulate("1f1b", 1, 1, model="llama3.1-8b", system="dgx-h100",
                             stack="torchtitan-compile")
    assert titan.metrics["stack"] == "torchtitan-compile"
    assert "attention flash2" in titan.metrics["stack_description"]
    cudnn = pipetab.simulate("1f1b", 1, 1, model="llama3.1-8b", system="dgx-h100",
                             stack="torchtitan-compile", attention_kernel="cudnn")
    assert cudnn.runtime_s < titan.runtime_s
    with pytest.raises(pipetab.Error, match="flash3"):
        pipetab.simulate("1f1b", 1, 1, model="llama3.1-8b", system="a100-80gb",
                         attention_kernel="flash3", flash_attention=True)
