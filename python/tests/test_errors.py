"""Bad input raises pipetab.Error with the command's message, or TypeError/ValueError for values
Python cannot pass; it never crashes the interpreter."""

import math

import pytest

import pipetab


@pytest.mark.parametrize("call,flags", [
    (lambda: pipetab.generate("no-such-schedule"), ["show", "no-such-schedule"]),
    (lambda: pipetab.generate("chimera", 3, 6), ["show", "chimera", "-S", 3, "-M", 6]),
    (lambda: pipetab.generate("1f1b", 0, 8), ["show", "1f1b", "-S", 0]),
    (lambda: pipetab.generate("1f1b", 4, -1), ["show", "1f1b", "-M", -1]),
    (lambda: pipetab.generate("1f1b", 70000, 1), ["show", "1f1b", "-S", 70000, "-M", 1]),
    (lambda: pipetab.generate("1f1b", chunks=2), ["show", "1f1b", "-v", 2]),
    (lambda: pipetab.generate("interleaved", 4, 8, chunks=0), ["show", "interleaved", "-v", 0]),
    (lambda: pipetab.generate("chimera", variant="bogus"), ["show", "chimera", "--variant", "bogus"]),
    (lambda: pipetab.generate("chimera-asym", split="x"), ["show", "chimera-asym", "--split", "x"]),
    (lambda: pipetab.analyze("1f1b", costs="F=-1"), ["analyze", "1f1b", "--costs", "F=-1"]),
    (lambda: pipetab.analyze("1f1b", costs="F=1,B=2,I=1,W=3"),
     ["analyze", "1f1b", "--costs", "F=1,B=2,I=1,W=3"]),
    (lambda: pipetab.analyze("1f1b", model="no-such-model"),
     ["analyze", "1f1b", "--model", "no-such-model"]),
    (lambda: pipetab.simulate("1f1b", system="/nonexistent/system.toml"),
     ["simulate", "1f1b", "--system", "/nonexistent/system.toml"]),
    (lambda: pipetab.tune(4, 8, memory_limit="lots"), ["tune", "--memory-limit", "lots"]),
    (lambda: pipetab.tune(0, 8), ["tune", "-S", 0]),
    # A GPU count over a depth of 0 is the depth's error (it divided by zero once).
    (lambda: pipetab.tune(0, 8, gpus=8), ["tune", "-S", 0, "--gpus", 8]),
    (lambda: pipetab.plan(gpus=16), ["plan", "--gpus", 16]),
    (lambda: pipetab.plan(gpus=16, global_batch=4, model="gpt3-13b", system="dgx-a100", tp=[3]),
     ["plan", "--gpus", 16, "--global-batch", 4, "--model", "gpt3-13b", "--system", "dgx-a100",
      "--tp", 3]),
    (lambda: pipetab.plan(from_run="no-such-run"), ["plan", "--from-run", "no-such-run"]),
    (lambda: pipetab.load_table("/nonexistent/table.csv"),
     ["analyze", "--table", "/nonexistent/table.csv"]),
])
def test_error_message_equals_cli(cli, call, flags):
    with pytest.raises(pipetab.Error) as error:
        call()
    assert str(error.value) == cli.error(*flags)


MALFORMED = {
    "garbage.csv": "this is not a table\n",
    "bad-action.csv": "0F0,0B0\n0F0,1X9\n",
    "truncated.json": '{"format": "pipetab-table", "devices": 2, ',
    "wrong-type.json": '{"format": "pipetab-table", "devices": "two"}\n',
    "empty.csv": "",
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_table_file_raises_as_cli(cli, tmp_path, name):
    path = tmp_path / name
    path.write_text(MALFORMED[name])
    with pytest.raises(pipetab.Error) as error:
        pipetab.load_table(str(path))
    assert str(error.value) == cli.error("analyze", "--table", path)
    # validate() reports a parse failure the same way (it cannot produce a report).
    with pytest.raises(pipetab.Error) as error:
        pipetab.validate(str(path))
    assert str(error.value) == cli.error("validate", path)


def test_parse_error_locates_the_problem(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("0F0,0B0\n0F0,1X9\n")
    with pytest.raises(pipetab.ParseError) as error:
        pipetab.load_table(str(path))
    assert error.value.file == str(path)
    assert error.value.line == 2
    assert str(error.value).startswith(f"{path}:2:{error.value.column}: ")
    assert isinstance(error.value, ValueError)


def test_invalid_table_raises_with_location(cli, tmp_path):
    path = tmp_path / "t.csv"
    pipetab.generate("1f1b", 2, 2).save(path)
    path.write_text(path.read_text().replace(",0B1\n", "\n"))  # rank 0 never runs B1
    with pytest.raises(pipetab.Error) as error:
        pipetab.load_table(str(path))
    assert str(error.value) == cli.error("analyze", "--table", path)
    table = pipetab.load_table(str(path), validate=False)  # read as it is
    assert table.num_ops == 2 * 2 * 2 - 1


def test_sizes_with_a_table_are_refused():
    table = pipetab.generate("1f1b", 2, 2)
    with pytest.raises(pipetab.Error, match="sets the sizes"):
        pipetab.analyze(table, devices=4)


# Values Python cannot pass as the library's types: every call raises, none crashes.
BAD_CALLS = [
    lambda: pipetab.generate(None),
    lambda: pipetab.generate(42),
    lambda: pipetab.generate("1f1b", None, 8),
    lambda: pipetab.generate("1f1b", "4", 8),
    lambda: pipetab.generate("1f1b", 4.0, 8),
    lambda: pipetab.generate("1f1b", 10**30, 8),
    lambda: pipetab.generate("1f1b", -(10**30), 8),
    lambda: pipetab.generate("1f1b", 2**63, 8),
    lambda: pipetab.generate("1f1b", 2**62, 2**62),
    lambda: pipetab.generate("1f1b", -5, -5),
    lambda: pipetab.generate("1f1b", 65535, 2**24),
    lambda: pipetab.generate("interleaved", 4, 8, chunks=2**40),
    lambda: pipetab.generate("hanayo", 4, 8, waves=-3),
    lambda: pipetab.generate("chimera", 4, 8, variant=7),
    lambda: pipetab.generate("1f1b", True, 8),
    lambda: pipetab.analyze(None),
    lambda: pipetab.analyze(["1f1b"]),
    lambda: pipetab.analyze("1f1b", dp=0),
    lambda: pipetab.analyze("1f1b", dp=10**9),
    lambda: pipetab.analyze("1f1b", dp="2"),
    lambda: pipetab.analyze("1f1b", runtime="fast"),
    lambda: pipetab.analyze("1f1b", runtime=3),
    lambda: pipetab.analyze("1f1b", tp_overlap="sometimes"),
    lambda: pipetab.analyze("1f1b", contention="yes"),
    lambda: pipetab.analyze("1f1b", dp_bucket_mb=math.nan),
    lambda: pipetab.analyze("1f1b", dp_bucket_mb=-1.0),
    lambda: pipetab.analyze("1f1b", input_grad_frees=math.nan),
    lambda: pipetab.analyze("1f1b", input_grad_frees=2.0),
    lambda: pipetab.analyze("1f1b", costs={"F": "one"}),
    lambda: pipetab.analyze("1f1b", costs={"Q": 1}),
    lambda: pipetab.analyze("1f1b", costs=[1, 2]),
    lambda: pipetab.analyze("1f1b", costs="F=inf"),
    lambda: pipetab.analyze("1f1b", costs="F=nan"),
    lambda: pipetab.analyze("1f1b", no_such_option=1),
    lambda: pipetab.analyze("1f1b", seq_len=2**70),
    lambda: pipetab.analyze("1f1b", nccl_buffsize=10**400),
    lambda: pipetab.analyze("1f1b", pipeline_layout=3),
    lambda: pipetab.analyze("1f1b", reshard_after_forward="sometimes"),
    lambda: pipetab.analyze("1f1b", gpus="8"),
    lambda: pipetab.analyze("1f1b", gpus=3, dp=2),
    lambda: pipetab.analyze("1f1b", job="/nonexistent/job.toml"),
    lambda: pipetab.analyze(job="/nonexistent/job.toml"),
    lambda: pipetab.analyze(None, pipeline_parallel=0),
    lambda: pipetab.analyze("1f1b", global_batch=7, dp=2),
    lambda: pipetab.simulate("1f1b", model={"name": "x"}),
    lambda: pipetab.simulate("1f1b", model={"transformer": {"layers": -1}}),
    lambda: pipetab.simulate("1f1b", model={"transformer": "garbage"}),
    lambda: pipetab.simulate("1f1b", model={1: 2}),
    lambda: pipetab.simulate("1f1b", model={"transformer": {"layers": object()}}),
    lambda: pipetab.simulate("1f1b", system={}),
    lambda: pipetab.simulate("1f1b", system={"network": {"devices_per_node": 10**30}}),
    lambda: pipetab.simulate("1f1b", system=None),
    lambda: pipetab.simulate("1f1b", model=3),  # (None is the command's default model)
    lambda: pipetab.compare(["1f1b", None]),
    lambda: pipetab.compare(["nope"]),
    lambda: pipetab.compare(tables=[None]),
    lambda: pipetab.compare(tables=["1f1b"]),
    lambda: pipetab.compare(devices=None),
    lambda: pipetab.load_table(None),
    lambda: pipetab.load_table(""),
    lambda: pipetab.load_table("/"),
    lambda: pipetab.validate("/nonexistent"),
    lambda: pipetab.validate("x.csv", max_issues=-1),
    lambda: pipetab.sweep("/nonexistent.toml"),
    lambda: pipetab.sweep(None),
    lambda: pipetab.sweep("x.toml", jobs=-1),
    lambda: pipetab.sweep("x.toml", shard=(3, 2)),
    lambda: pipetab.sweep("x.toml", shard=(0, 0)),
    lambda: pipetab.tune(4, 8, memory_limit=-1),
    lambda: pipetab.tune(4, 8, memory_limit=math.inf),
    lambda: pipetab.tune(10**30, 8),
    lambda: pipetab.tune(-1, -1),
    lambda: pipetab.tune(4, 8, runnable_by="async"),
    lambda: pipetab.tune(4, 8, runnable_by="tensorflow"),
    lambda: pipetab.plan(gpus=-8, global_batch=8),
    lambda: pipetab.plan(gpus=8, global_batch=-8),
    lambda: pipetab.plan(gpus=8, global_batch=8, top=0),
    lambda: pipetab.plan(gpus=8, global_batch=8, threads=-1),
    lambda: pipetab.plan(gpus=8, global_batch=8, tp=[0]),
    lambda: pipetab.plan(gpus=8, global_batch=8, tp=["x"]),
    lambda: pipetab.plan(gpus=8, global_batch=8, schedules=["nope"]),
    lambda: pipetab.plan(gpus=8, global_batch=8, recompute=["sometimes"]),
    lambda: pipetab.plan(gpus=8, global_batch=8, sequence_parallel="maybe"),
    lambda: pipetab.plan(gpus=8, global_batch=8, memory_reserve=1.5),
    lambda: pipetab.plan(gpus=8, global_batch=8, memory_reserve=math.nan),
    lambda: pipetab.plan(gpus=8, global_batch=8, shard=(2, 1)),
    lambda: pipetab.plan(gpus=8, global_batch=8, model={"transformer": {}}),
    lambda: pipetab.preset("model", "nope"),
    lambda: pipetab.preset("kernel", "default"),
    lambda: pipetab.generate("1f1b").export("xml"),
    lambda: pipetab.generate("chimera", 4, 8).export("pytorch"),
    lambda: pipetab.generate("1f1b").timing(costs="B=0"),
    lambda: pipetab.tune(4, 8).table(10**6),
]


@pytest.mark.parametrize("index", range(len(BAD_CALLS)))
def test_bad_input_raises(index):
    with pytest.raises((pipetab.Error, TypeError, ValueError, OverflowError, IndexError)):
        BAD_CALLS[index]()


def test_layout_errors_name_the_rule():
    with pytest.raises(pipetab.ParamError, match=r"--cp 3: the sequence of 8192 tokens"):
        pipetab.simulate("1f1b", 2, 2, model="llama3.1-8b", system="dgx-h100", cp=3)
    with pytest.raises(TypeError, match="pipetab.FSDP"):
        pipetab.simulate("1f1b", 2, 2, fsdp="yes")


def test_unknown_keyword_names_it_and_the_nearest():
    with pytest.raises(TypeError, match=r"^simulate\(\) got an unexpected keyword argument "
                                        r"'seqlen'; did you mean 'seq_len'\?$"):
        pipetab.simulate("1f1b", seqlen=4096)
    with pytest.raises(TypeError, match=r"^tune\(\) got an unexpected keyword argument "
                                        r"'recompte'; did you mean 'recompute'\?$"):
        pipetab.tune(4, 8, recompte="full")
    with pytest.raises(TypeError, match=r"'no_such_option' \(pipetab.run_options\(\) lists them\)"):
        pipetab.analyze("1f1b", no_such_option=1)
    # plan searches the layout's degrees itself: a run option it searches is not its keyword.
    with pytest.raises(TypeError, match=r"^plan\(\) got an unexpected keyword argument 'dp': "
                                        r"plan searches data_parallel"):
        pipetab.plan(gpus=8, global_batch=8, dp=2)
    with pytest.raises(TypeError, match="plan searches tensor_parallel"):
        pipetab.plan(gpus=8, global_batch=8, tensor_parallel=2)


def test_keyword_values_are_checked_and_named():
    # Two keywords for one option are ambiguous.
    with pytest.raises(TypeError, match=r"tp and tensor_parallel both set tensor_parallel"):
        pipetab.simulate("1f1b", tp=2, tensor_parallel=4)
    with pytest.raises(TypeError, match=r"fsdp_impl and fsdp.impl both set fsdp_impl"):
        pipetab.simulate("1f1b", dp=2, fsdp_impl="megatron", fsdp=pipetab.FSDP())
    # A value Python cannot mean as the option's type: TypeError naming the keyword.
    with pytest.raises(TypeError, match=r"^seq_len: expected an int, got str$"):
        pipetab.simulate("1f1b", seq_len="4096")
    with pytest.raises(TypeError, match=r"^flash_attention: expected True or False, got int$"):
        pipetab.simulate("1f1b", flash_attention=1)
    with pytest.raises(TypeError, match=r"^fsdp.shard: expected an int, got float$"):
        pipetab.simulate("1f1b", dp=4, fsdp=pipetab.FSDP(shard=2.0))
    # The library's range and choices, named by the keyword (the flag's unit for dp_bucket_mb).
    with pytest.raises(pipetab.Error, match=r"^seq_len: seq_len = '0': expected a whole number "
                                            r"from 1 to \d+$"):
        pipetab.simulate("1f1b", seq_len=0)
    with pytest.raises(pipetab.Error, match=r"^recompute: recompute = 'sometimes': expected one "
                                            r"of none, selective, full"):
        pipetab.analyze("1f1b", recompute="sometimes")
    with pytest.raises(pipetab.Error, match=r"^dp_bucket_mb: dp_bucket_bytes = "):
        pipetab.analyze("1f1b", dp_bucket_mb=1e-9)
