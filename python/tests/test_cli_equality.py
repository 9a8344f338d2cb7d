"""Every result equals the pipetab command's JSON (or text) for the same request."""

import json
import pathlib

import pytest

import pipetab

# (subject, keyword arguments, the command's flags)
ANALYZE_CASES = [
    ("1f1b", {}, []),
    ("gpipe", dict(devices=8, microbatches=16), ["-S", 8, "-M", 16]),
    ("interleaved", dict(devices=4, microbatches=8, chunks=3), ["-S", 4, "-M", 8, "-v", 3]),
    ("chimera", dict(devices=4, microbatches=8, variant="doubling"),
     ["-S", 4, "-M", 8, "--variant", "doubling"]),
    ("hanayo", dict(devices=4, microbatches=4, waves=2), ["-S", 4, "-M", 4, "-W", 2]),
    ("zb-h1", dict(costs="F=1,B=3", input_grad_frees=0.5, system="network-bound"),
     ["--costs", "F=1,B=3", "--input-grad-frees", 0.5, "--system", "network-bound"]),
    ("1f1b", dict(devices=8, microbatches=32, model="gpt3-13b", system="dgx-h100", dp=2,
                  runtime="megatron", tp_overlap="all", dp_overlap=True,
                  distributed_optimizer=True),
     ["-S", 8, "-M", 32, "--model", "gpt3-13b", "--system", "dgx-h100", "--dp", 2,
      "--runtime", "megatron", "--tp-overlap", "all", "--dp-overlap",
      "--distributed-optimizer"]),
    ("gpipe", dict(system="dgx-h100", model="gpt3-1.3b", overheads=False),
     ["--system", "dgx-h100", "--model", "gpt3-1.3b", "--no-overheads"]),
    # The layout: TP, CP and FSDP with their options.
    ("interleaved", dict(devices=4, microbatches=8, model="llama3.1-8b", system="dgx-h100",
                         tp=2, cp=2, cp_method="allgather", dp=2),
     ["-S", 4, "-M", 8, "--model", "llama3.1-8b", "--system", "dgx-h100", "--tp", 2, "--cp", 2,
      "--cp-method", "allgather", "--dp", 2]),
    ("1f1b", dict(devices=2, microbatches=4, model="llama3.1-8b", system="dgx-h100", dp=4,
                  fsdp=pipetab.FSDP(shard=2, reshard_after_forward=True, grad_sync="microbatch",
                                    fp8_all_gather=True)),
     ["-S", 2, "-M", 4, "--model", "llama3.1-8b", "--system", "dgx-h100", "--dp", 4, "--fsdp",
      "--fsdp-shard", 2, "--reshard-after-forward", "on", "--fsdp-grad-sync", "microbatch",
      "--fsdp-fp8-all-gather"]),
    ("1f1b", dict(devices=1, microbatches=1, model="llama3.1-8b", system="grand-teton-h100",
                  dp=8, fsdp=True),
     ["-S", 1, "-M", 1, "--model", "llama3.1-8b", "--system", "grand-teton-h100", "--dp", 8,
      "--fsdp"]),
    ("1f1b", dict(devices=1, microbatches=2, model="llama3.1-8b", system="dgx-h100", dp=8,
                  fsdp=pipetab.FSDP(impl="megatron")),
     ["-S", 1, "-M", 2, "--model", "llama3.1-8b", "--system", "dgx-h100", "--dp", 8, "--fsdp",
      "--fsdp-impl", "megatron"]),
    # A mixture of experts: expert parallelism, sequence parallelism and the all-to-all overlap.
    ("interleaved", dict(devices=2, microbatches=4, model="qwen3-30b-a3b", system="dgx-h100",
                         tp=2, sequence_parallel=True, dp=8, ep=8, a2a_overlap=True),
     ["-S", 2, "-M", 4, "--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--tp", 2,
      "--sequence-parallel", "--dp", 8, "--ep", 8, "--a2a-overlap"]),
    # ... and without pipelining: 1F1B at S = 1 in Megatron-Core's combined order.
    ("1f1b", dict(devices=1, microbatches=4, model="qwen3-30b-a3b", system="dgx-h100", dp=8,
                  ep=8, a2a_overlap=True),
     ["-S", 1, "-M", 4, "--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--dp", 8, "--ep", 8,
      "--a2a-overlap"]),
    # Blocking sends are an idealised runtime's option (PyTorch's own order deadlocks with them).
    ("zb-v", dict(contention=False, blocking_send=True, optimizer=False, runtime="async"),
     ["--no-contention", "--blocking-send", "--no-optimizer", "--runtime", "async"]),
]


@pytest.mark.parametrize("name,kwargs,flags", ANALYZE_CASES)
def test_analyze_equals_cli(cli, name, kwargs, flags):
    assert pipetab.analyze(name, **kwargs).to_dict() == cli.json("analyze", name, *flags)


def test_analyze_memory_curves_equals_cli(cli):
    ours = pipetab.analyze("zb-h2", memory_curves=True).to_dict()
    assert ours == cli.json("analyze", "zb-h2", "--memory-curves")
    assert "activation_curve" in ours["table"]


@pytest.mark.parametrize("name,kwargs,flags", ANALYZE_CASES)
def test_simulate_equals_cli(cli, name, kwargs, flags):
    kwargs = dict(kwargs)
    kwargs.pop("input_grad_frees", None)  # simulate reports no table level
    flags = [f for i, f in enumerate(flags)
             if f != "--input-grad-frees" and (i == 0 or flags[i - 1] != "--input-grad-frees")]
    assert pipetab.simulate(name, **kwargs).to_dict() == cli.json("simulate", name, *flags)


# Every option of a run is a keyword (its key, or its flag's name): those the API had no keyword
# for before the options were defined once (sim/options.hpp), as the command's flags.
RUN_OPTION_CASES = [
    ("1f1b", dict(devices=4, microbatches=8, model="llama3.1-8b", system="dgx-h100",
                  seq_len=4096, recompute="full"),
     ["-S", 4, "-M", 8, "--model", "llama3.1-8b", "--system", "dgx-h100", "--seq-len", 4096,
      "--recompute", "full"]),
    ("interleaved", dict(devices=4, microbatches=8, model="llama3.1-8b", system="dgx-h100",
                         precision="fp8", fp8_recipe="delayed", tensor_parallel=2,
                         sequence_parallel=True, flash_attention=False, micro_batch=2),
     ["-S", 4, "-M", 8, "--model", "llama3.1-8b", "--system", "dgx-h100", "--precision", "fp8",
      "--fp8-recipe", "delayed", "--tp", 2, "--sequence-parallel", "--no-flash-attention",
      "--micro-batch", 2]),
    ("interleaved", dict(devices=2, microbatches=4, model="qwen3-30b-a3b", system="dgx-h100",
                         dp=8, ep=8, moe_dispatcher="deepep", moe_capacity_factor=1.25),
     ["-S", 2, "-M", 4, "--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--dp", 8, "--ep", 8,
      "--moe-dispatcher", "deepep", "--moe-capacity-factor", 1.25]),
    ("1f1b", dict(devices=2, microbatches=4, model="qwen3-30b-a3b", system="dgx-h100",
                  dp=8, ep=8, moe_imbalance=1.5),
     ["-S", 2, "-M", 4, "--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--dp", 8, "--ep", 8,
      "--moe-imbalance", 1.5]),
    ("1f1b", dict(model="gpt3-1.3b", system="dgx-a100", dp=2, dp_overlap=True, dp_bucket_mb=50,
                  collective_scale=0.7, nccl_buffsize=1 << 20, runtime="pytorch"),
     ["--model", "gpt3-1.3b", "--system", "dgx-a100", "--dp", 2, "--dp-overlap",
      "--dp-bucket-mb", 50, "--collective-scale", 0.7, "--nccl-buffsize", 1 << 20,
      "--runtime", "pytorch"]),
    # The global batch gives the microbatches: 16 / (micro batch 2 × DP 2) = 4.
    ("1f1b", dict(devices=2, model="llama3.1-8b", system="dgx-h100", data_parallel=2,
                  micro_batch=2, global_batch=16),
     ["-S", 2, "--model", "llama3.1-8b", "--system", "dgx-h100", "--dp", 2, "--micro-batch", 2,
      "--global-batch", 16]),
    ("1f1b", dict(devices=1, microbatches=2, model="llama3.1-8b", system="dgx-h100", dp=8,
                  fsdp=True, fsdp_shard=4, fsdp_grad_sync="microbatch",
                  reshard_after_forward="auto"),
     ["-S", 1, "-M", 2, "--model", "llama3.1-8b", "--system", "dgx-h100", "--dp", 8, "--fsdp",
      "--fsdp-shard", 4, "--fsdp-grad-sync", "microbatch", "--reshard-after-forward", "auto"]),
]


@pytest.mark.parametrize("command", ["analyze", "simulate"])
@pytest.mark.parametrize("name,kwargs,flags", RUN_OPTION_CASES)
def test_run_options_equal_cli(cli, command, name, kwargs, flags):
    result = getattr(pipetab, command)(name, **kwargs)
    assert result.to_dict() == cli.json(command, name, *flags)


def jobs(source_dir):
    return source_dir / "tests" / "data" / "jobs"


# A job file (job=, --job): its options under the keywords', its schedule, depth, chunks and
# global batch where the call leaves them, the data-parallel replicas from gpus.
JOB_CASES = [
    ("1f1b", "megatron_llama3_8b_h100_fp8.args", dict(model="llama3.1-8b", system="dgx-h100"),
     ["--model", "llama3.1-8b", "--system", "dgx-h100"]),
    ("1f1b", "llama3_8b.toml", dict(model="llama3.1-8b", system="dgx-h100", gpus=8),
     ["--model", "llama3.1-8b", "--system", "dgx-h100", "--gpus", 8]),
    # The keywords override the file's (per-op selective recomputation, sequence length 8192).
    ("1f1b", "llama3_8b.toml", dict(model="llama3.1-8b", system="dgx-h100", gpus=8,
                                     recompute="full", seq_len=2048),
     ["--model", "llama3.1-8b", "--system", "dgx-h100", "--gpus", 8, "--recompute", "full",
      "--seq-len", 2048]),
    # No schedule name: the file's (interleaved, 4 chunks, PP 12, 12 microbatches).
    (None, "megatron_sc21_figure_12.args", dict(model="gpt3-175b", system="dgx-a100", gpus=96),
     ["--model", "gpt3-175b", "--system", "dgx-a100", "--gpus", 96]),
]


@pytest.mark.parametrize("command", ["analyze", "simulate"])
@pytest.mark.parametrize("name,job,kwargs,flags", JOB_CASES)
def test_job_file_equals_cli(cli, source_dir, command, name, job, kwargs, flags):
    path = jobs(source_dir) / job
    result = getattr(pipetab, command)(name, job=path, **kwargs)
    assert result.to_dict() == cli.json(command, *([name] if name else []), "--job", path, *flags)


def test_job_file_compare_and_plan_equal_cli(cli, source_dir):
    path = jobs(source_dir) / "megatron_llama3_8b_h100_fp8.args"
    args = dict(model="llama3.1-8b", system="dgx-h100")
    flags = ["--model", "llama3.1-8b", "--system", "dgx-h100", "--job", path]
    ours = pipetab.compare(["1f1b", "gpipe"], job=path, **args)
    assert ours.to_dict() == cli.json("compare", "1f1b", "gpipe", *flags)
    # plan ranks the file's layout as the reference; seq_len is a run option plan does not search.
    ours = pipetab.plan(gpus=8, global_batch=128, job=path, top=3, tp=[1, 2], pp=[1, 2],
                        micro_batch=[1], schedules=["1f1b"], seq_len=4096, **args)
    assert ours.to_dict() == cli.json("plan", "--gpus", 8, "--global-batch", 128, "--top", 3,
                                      "--tp", "1,2", "--pp", "1,2", "--micro-batch", 1,
                                      "--schedules", "1f1b", "--seq-len", 4096, *flags)
    assert ours.reference is not None


def test_job_file_microbatches_must_agree(cli, source_dir):
    path = jobs(source_dir) / "megatron_llama3_8b_h100_fp8.args"
    with pytest.raises(pipetab.ParamError) as error:
        pipetab.simulate("1f1b", microbatches=4, job=path, model="llama3.1-8b", system="dgx-h100")
    # The command's message (after its notes on what it read), naming the keyword for -M.
    done = cli.run("simulate", "1f1b", "-M", 4, "--job", path, "--model", "llama3.1-8b",
                   "--system", "dgx-h100")
    assert done.returncode == 2
    theirs = done.stderr.strip().splitlines()[-1].removeprefix("pipetab: error: ")
    assert str(error.value) == theirs.replace("-M", "microbatches")


@pytest.mark.parametrize("fmt", ["json", "csv", "pytorch", "pytorch-comms"])
def test_export_equals_show(cli, fmt):
    table = pipetab.generate("interleaved", 4, 8, chunks=2)
    shown = cli.run("show", "interleaved", "-S", 4, "-M", 8, "-v", 2, "--format", fmt)
    assert shown.returncode == 0, shown.stderr
    assert table.export(fmt) == shown.stdout


def test_table_file_round_trip_equals_cli(cli, tmp_path):
    # A JSON table that names its schedule is evaluated as that schedule (formula level
    # included), a CSV table as a user table: both as the command does.
    for suffix in ("json", "csv"):
        path = tmp_path / f"zbv.{suffix}"
        pipetab.generate("zb-v", 4, 8).save(path)
        ours = pipetab.analyze(pipetab.load_table(str(path))).to_dict()
        assert ours == cli.json("analyze", "--table", str(path))
        assert pipetab.analyze(path).to_dict() == ours  # a pathlib.Path is a table file
        assert (ours["formula"] is not None) == (suffix == "json")


def test_pytorch_comms_file_simulates_as_cli(cli, source_dir):
    path = source_dir / "tests" / "data" / "pytorch" / "zb1p_comms_new.csv"
    if not path.exists():
        pytest.skip(f"{path} is missing")
    table = pipetab.load_table(str(path))
    assert table.has_comms
    assert pipetab.simulate(table).to_dict() == cli.json("simulate", "--table", str(path))


@pytest.mark.parametrize("kwargs,flags", [
    ({}, []),
    (dict(names=["1f1b", "zb-h1", "chimera"], devices=4, microbatches=8, system="balanced",
          chunks=3), ["1f1b", "zb-h1", "chimera", "-S", 4, "-M", 8, "--system", "balanced",
                      "-v", 3]),
    (dict(names=["chimera", "1f1b"], devices=3, microbatches=6),  # chimera is skipped at S=3
     ["chimera", "1f1b", "-S", 3, "-M", 6]),
])
def test_compare_equals_cli(cli, kwargs, flags):
    assert pipetab.compare(**kwargs).to_dict() == cli.json("compare", *flags)


def test_compare_with_table_equals_cli(cli, tmp_path):
    path = tmp_path / "mine.csv"
    pipetab.generate("zb-h2", 8, 8).save(path)
    ours = pipetab.compare(["1f1b"], [pipetab.load_table(str(path))], system="balanced")
    assert ours.to_dict() == cli.json("compare", "1f1b", "--table", path, "--system", "balanced")
    frame = ours.to_pandas()
    assert list(frame["schedule"]) == ["1f1b", str(path)]


def test_list_equals_cli(cli):
    assert pipetab.list_schedules() == cli.json("list")


def test_validate_equals_cli(cli, tmp_path):
    good = tmp_path / "good.csv"
    pipetab.generate("1f1b", 2, 2).save(good)
    assert pipetab.validate(good).to_dict() == cli.json("validate", good)
    # Drop rank 0's last action: microbatch 1's backward of stage 0 is missing.
    bad = tmp_path / "bad.csv"
    bad.write_text(good.read_text().replace(",0B1\n", "\n"))
    report = pipetab.validate(bad)
    expected = cli.run("validate", bad, "--format", "json")
    assert expected.returncode == 2
    assert report.to_dict() == json.loads(expected.stdout)
    assert not report.valid and report.issue_count >= 1
    assert len(report.to_pandas()) == len(report.issues)
    with pytest.raises(pipetab.Error) as error:
        pipetab.validate(bad, check=True)
    assert str(error.value) == cli.error("validate", bad, "--format", "json")


@pytest.mark.parametrize("kwargs,flags", [
    (dict(devices=4, microbatches=4), ["-S", 4, "-M", 4]),
    (dict(devices=4, microbatches=8, memory_limit="3", builtins=False, system="network-bound"),
     ["-S", 4, "-M", 8, "--memory-limit", "3", "--no-builtins", "--system", "network-bound"]),
    (dict(devices=4, microbatches=8, memory_limit="600GB", runnable_by="pytorch"),
     ["-S", 4, "-M", 8, "--memory-limit", "600GB", "--runnable-by", "pytorch"]),
])
def test_tune_equals_cli(cli, tmp_path, kwargs, flags):
    result = pipetab.tune(**kwargs)
    assert result.to_dict() == cli.json("tune", *flags)
    best = result.best_table()
    assert best is not None and best.name == result.best["name"]
    # The best table is what `tune -t` writes.
    out = tmp_path / "best.json"
    cli.json("tune", *flags, "-t", out)
    assert best.export("json") == out.read_text()


def test_tune_table_of_every_candidate(cli):
    result = pipetab.tune(4, 4)
    for i, candidate in enumerate(result.candidates):
        table = result.table(i)
        assert table.name == candidate["name"]
        assert (table.devices, table.microbatches) == (4, 4)


PLAN = dict(model="gpt3-13b", system="dgx-a100", gpus=16, global_batch=32)
PLAN_FLAGS = ["--model", "gpt3-13b", "--system", "dgx-a100", "--gpus", 16, "--global-batch", 32]


def test_plan_equals_cli(cli, tmp_path):
    result = pipetab.plan(**PLAN, top=5)
    assert result.to_dict() == cli.json("plan", *PLAN_FLAGS, "--top", 5)
    assert len(result.top) == 5 and len(result.to_pandas()) == 5
    # The frame carries what the command's table prints: tokens/s and MFU beside the runtime.
    frame = result.to_pandas()
    cli_top = cli.json("plan", *PLAN_FLAGS, "--top", 5)["top"]
    assert list(frame["tokens_per_s"]) == [e["simulation"]["tokens_per_s"] for e in cli_top]
    assert list(frame["mfu"]) == [e["simulation"]["mfu"] for e in cli_top]
    assert all(0 < m < 1 for m in frame["mfu"])
    out = tmp_path / "best.json"
    cli.json("plan", *PLAN_FLAGS, "-t", out)
    assert result.table(1).export("json") == out.read_text()


def test_plan_options_equal_cli(cli):
    result = pipetab.plan(**PLAN, tp=[2, 4], pp=[2], micro_batch=[1, 2],
                          schedules=["1f1b", "interleaved"], recompute=["selective"],
                          sequence_parallel=True, distributed_optimizer=False,
                          runtime="megatron", tp_overlap="none", dp_overlap=True, prune=False,
                          memory_reserve=0.1, threads=1)
    flags = ["--tp", "2,4", "--pp", 2, "--micro-batch", "1,2", "--schedules", "1f1b,interleaved",
             "--recompute", "selective", "--sequence-parallel", "on",
             "--distributed-optimizer", "off", "--runtime", "megatron", "--tp-overlap", "none",
             "--dp-overlap", "--no-prune", "--memory-reserve", 0.1, "-j", 1]
    assert result.to_dict() == cli.json("plan", *PLAN_FLAGS, *flags)


def test_plan_cp_and_fsdp_equal_cli(cli):
    # CP and FSDP in the search, as `plan --cp --cp-method --fsdp`.
    args = dict(model="llama3.1-8b", system="llama3-h100-roce", gpus=16, global_batch=16)
    flags = ["--model", "llama3.1-8b", "--system", "llama3-h100-roce", "--gpus", 16,
             "--global-batch", 16]
    result = pipetab.plan(**args, cp=[1, 2], cp_method="allgather", fsdp=None, micro_batch=[1],
                          schedules=["1f1b", "zb-v"], top=4)
    assert result.to_dict() == cli.json("plan", *flags, "--cp", "1,2", "--cp-method", "allgather",
                                        "--fsdp", "both", "--micro-batch", 1,
                                        "--schedules", "1f1b,zb-v", "--top", 4)
    layouts = [entry["layout"] for entry in result.to_dict()["top"]]
    assert {layout["context_parallel"] for layout in layouts} <= {1, 2}
    with pytest.raises(pipetab.Error, match="--cp-method ulysses"):
        pipetab.plan(**args, cp=[2], cp_method="ulysses")


def test_plan_expert_parallel_equals_cli(cli):
    # EP and the all-to-all overlap in the search, as `plan --ep --a2a-overlap`.
    args = dict(model="qwen3-30b-a3b", system="dgx-h100", gpus=16, global_batch=32)
    flags = ["--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--gpus", 16,
             "--global-batch", 32]
    result = pipetab.plan(**args, ep=[4, 8], a2a_overlap=True, micro_batch=[1],
                          schedules=["interleaved", "dualpipev"], top=4)
    assert result.to_dict() == cli.json("plan", *flags, "--ep", "4,8", "--a2a-overlap", "on",
                                        "--micro-batch", 1, "--schedules", "interleaved,dualpipev",
                                        "--top", 4)
    layouts = [entry["layout"] for entry in result.to_dict()["top"]]
    assert layouts and {layout["expert_parallel"] for layout in layouts} <= {4, 8}


def test_plan_search_equals_cli(cli):
    # Any other option searched, as `plan --search KEY=A,B`; booleans as true/false.
    args = dict(model="qwen3-30b-a3b", system="dgx-h100", gpus=16, global_batch=32)
    flags = ["--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--gpus", 16,
             "--global-batch", 32]
    search = {"moe_dispatcher": ["alltoall", "deepep"], "moe_fp8_dispatch": [False, True]}
    result = pipetab.plan(**args, ep=[8], micro_batch=[1], schedules=["1f1b"], search=search,
                          top=6)
    assert result.to_dict() == cli.json("plan", *flags, "--ep", 8, "--micro-batch", 1,
                                        "--schedules", "1f1b",
                                        "--search", "moe_dispatcher=alltoall,deepep",
                                        "--search", "moe_fp8_dispatch=false,true", "--top", 6)
    for entry in result.to_dict()["top"]:
        options = entry["layout"]["options"]
        assert list(options) == ["moe_dispatcher", "moe_fp8_dispatch"]
        assert options["moe_dispatcher"] in ("alltoall", "deepep")
        assert options["moe_fp8_dispatch"] in ("false", "true")
    with pytest.raises(pipetab.Error, match="give its values with --recompute"):
        pipetab.plan(**args, search={"recompute": ["full"]})
    with pytest.raises(ValueError, match="moe_dispatcher"):
        pipetab.plan(**args, search={"moe_dispatcher": ["alltoall,deepep"]})
    with pytest.raises(TypeError, match="search"):
        pipetab.plan(**args, search=["moe_dispatcher"])


def test_plan_from_run_equals_cli(cli):
    # A published run (data/published-runs.toml) as the reference layout.
    result = pipetab.plan(from_run="1.7B", keep_run_options=True, top=3)
    assert result.to_dict() == cli.json("plan", "--from-run", "1.7B", "--keep-run-options",
                                        "--top", 3)
    assert result.reference is not None and "rank" in result.reference


STUDY = """
name = "python-equality"
[grid]
schedules = ["1f1b", "zb-h1", { name = "chimera", variants = ["direct", "doubling"] }]
devices = [3, 4]
microbatches = [4, 8]
systems = ["balanced", "network-bound"]
bandwidth_scale = [1, 0.5]
"""


@pytest.mark.parametrize("jobs", [1, 2])
def test_sweep_equals_cli_byte_for_byte(cli, tmp_path, jobs):
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    result = pipetab.sweep(study, jobs=jobs)
    csv = tmp_path / "cli.csv"
    jsonl = tmp_path / "cli.jsonl"
    assert cli.run("sweep", study, "-o", csv, "-j", 2).returncode == 0
    assert cli.run("sweep", study, "-o", jsonl, "-j", 1).returncode == 0
    assert result.to_csv() == csv.read_text()
    assert result.to_jsonl() == jsonl.read_text()
    # Rows from Python equal the command's JSON Lines, row for row.
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert result.records() == lines
    # 1f1b, zb-h1 and chimera twice (two variants) × S × M × systems × bandwidth scales.
    assert len(result) == 4 * 2 * 2 * 2 * 2
    frame = result.to_pandas()
    assert list(frame.columns) == result.columns and len(frame) == len(result)
    # Written by sweep(output=...) as the command writes it.
    ours = tmp_path / "ours.csv"
    pipetab.sweep(study, output=ours)
    assert ours.read_text() == csv.read_text()


def test_sweep_shards_equal_cli(cli, tmp_path):
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    for k in (1, 2, 3):
        out = tmp_path / f"shard{k}.csv"
        assert cli.run("sweep", study, "-o", out, "--shard", f"{k}/3").returncode == 0
        assert pipetab.sweep(study, shard=(k, 3)).to_csv(header=k == 1) == out.read_text()


def test_sweep_of_a_repository_study_equals_cli(cli, source_dir, tmp_path):
    study = source_dir / "experiments" / "fig3-bubble.toml"
    out = tmp_path / "fig3.csv"
    assert cli.run("sweep", study, "-o", out).returncode == 0
    assert pipetab.sweep(study).to_csv() == out.read_text()
