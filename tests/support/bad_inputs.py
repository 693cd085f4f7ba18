"""The bad-input table: every sub-command, each case a command line and a piece of the one-line error it must
give. `{store}` is a store holding one finished run, `{run}` that run's id, `{dir}` a scratch folder holding the
hostile files made by `hostile_files`."""

from __future__ import annotations

import os
from pathlib import Path

BILLION_LAUGHS = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9))
    + "name: x\naxes: {model: resnet50}\n"
)
GOOD = "name: s\naxes: {framework: fake, model: resnet50}\n"


def hostile_files(folder: Path) -> None:
    """Write the suite files the table refers to."""
    texts: dict[str, str | bytes] = {
        "bomb.yaml": BILLION_LAUGHS,
        "deep.yaml": "name: x\naxes: " + "[" * 5000 + "]" * 5000 + "\n",
        "deepmap.yaml": "name: x\naxes: " + "{a: " * 200 + "1" + "}" * 200 + "\n",
        "binary.yaml": b"name: x\n\x00\x01\x02\xff",
        "latin1.yaml": b"name: caf\xe9\naxes: {model: resnet50}\n",
        "huge.yaml": "name: x\n#" + "x" * (2 << 20) + "\n",
        "inf.yaml": "name: x\ntimeout: .inf\naxes: {framework: fake, model: resnet50}\n",
        "nan.yaml": "name: x\ntimeout: .nan\naxes: {framework: fake, model: resnet50}\n",
        "neg.yaml": "name: x\ntimeout: -5\naxes: {framework: fake, model: resnet50}\n",
        "launcher.yaml": "name: x\nlauncher: nosuch\naxes: {framework: fake, model: resnet50}\n",
        "model.yaml": "name: x\naxes: {framework: fake, model: resnet51}\n",
        "framework.yaml": "name: x\naxes: {framework: caffe, model: resnet50}\n",
        "batch.yaml": "name: x\naxes: {framework: fake, model: resnet50, batch: [0]}\n",
        "precision.yaml": "name: x\naxes: {framework: fake, model: resnet50, precision: [fp4]}\n",
        "scale.yaml": "name: x\naxes: {framework: fake, model: resnet50, scale: [two]}\n",
        "unknownkey.yaml": "name: x\ncolour: red\naxes: {framework: fake, model: resnet50}\n",
        "noaxes.yaml": "name: x\n",
        "list.yaml": "- a\n- b\n",
        "scalar.yaml": "just words\n",
        "empty.yaml": "",
        "invalid.yaml": "name: [unclosed\n",
        "tabs.yaml": "name: x\n\taxes: {}\n",
        "python.yaml": "name: !!python/object/apply:os.system ['touch pwned']\naxes: {model: resnet50}\n",
        "memory.yaml": "name: x\nmemory_limit: lots\naxes: {framework: fake, model: resnet50}\n",
        "inputsize.yaml": "name: x\ninput_size: 0\naxes: {framework: fake, model: resnet50}\n",
        "params.yaml": "name: x\naxes: {framework: fake, model: wide_deep}\nparams: {vocab: [lots]}\n",
        "paramname.yaml": "name: x\naxes: {framework: fake, model: resnet50}\nparams: {vocab: [1000]}\n",
        "parammax.yaml": "name: x\naxes: {framework: fake, model: wide_deep}\nparams: {sparse: max}\n",
        "good.yaml": GOOD,
    }
    for name, text in texts.items():
        path = folder / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
    (folder / "a_folder.yaml").mkdir()
    (folder / "not_a_store.db").write_bytes(b"this is not SQLite at all, just bytes " * 100)
    (folder / "notes.txt").write_text("hello\n")
    # reliability (#25): a FIFO as report output, a chart folder dlbench did not make, and two suite files
    os.mkfifo(folder / "pipe.html")
    (folder / "user_files").mkdir()
    (folder / "user_files" / "mine.txt").write_text("the user's own file\n")
    (folder / "dupkey.yaml").write_text("name: x\naxes: {framework: fake, model: resnet50}\nname: y\n")
    (folder / "hugescale.yaml").write_text("name: x\naxes: {framework: fake, model: resnet50, scale: [1n100000c]}\n")


# (command line, a piece of the error). Every one must exit 2 with one line on stderr, no traceback, store unchanged.
BAD_INPUTS: list[tuple[str, str]] = [
    # run
    ("run -m resnet51 --store {store}", "unknown model 'resnet51'"),
    ("run -m , --store {store}", "model"),
    ("run -f caffe --store {store}", "unknown framework 'caffe'"),
    ("run -f fake,caffe --store {store}", "unknown framework 'caffe'"),
    ("run --preset fastest --store {store}", "fastest"),
    ("run -b 0 --store {store}", "batch size must be a whole number >= 1"),
    ("run -b -4 --store {store}", "batch size must be a whole number >= 1"),
    ("run -b eight --store {store}", "batch size must be a whole number >= 1"),
    ("run -b 1.5 --store {store}", "batch size must be a whole number >= 1"),
    ("run -b 99999999999999999999 -f fake --store {store}", "batch"),
    ("run -p fp4 --store {store}", "precision must be one of"),
    ("run -p fp32,fp4 --store {store}", "precision must be one of"),
    ("run --scale two --store {store}", "scale must look like"),
    ("run --scale 0n1c --store {store}", "scale"),
    ("run --scale 1n0c --store {store}", "scale"),
    ("run --memory-limit lots --store {store}", "memory size must look like"),
    ("run --memory-limit -1G --store {store}", "memory size must look like"),
    ("run --data real --store {store}", "real data needs a data folder"),
    ("run --data real --data-dir {dir}/nowhere --store {store}", "nowhere"),
    ("run --data real --data-dir {dir} -f fake --store {store}", "data"),
    ("run --timeout nan --store {store}", "finite"),
    ("run --timeout inf --store {store}", "finite"),
    ("run --timeout 1e400 --store {store}", "finite"),
    ("run --timeout -1 --store {store}", "timeout"),
    ("run --timeout 0 --store {store}", "timeout"),
    ("run --timeout soon --store {store}", "timeout"),
    ("run --steps 0 --store {store}", "steps"),
    ("run --steps -3 --store {store}", "steps"),
    ("run --repeats 0 --store {store}", "repeats"),
    ("run --warmup -1 --store {store}", "warmup"),
    ("run --input-size 0 --store {store}", "input-size"),
    ("run --threads 0 --store {store}", "threads"),
    ("run --threads many --store {store}", "give auto or a whole number of threads"),
    ("run --device tpu --store {store}", "device"),
    ("run --statistic mode --store {store}", "statistic"),
    ("run --strategy magic --store {store}", "strategy"),
    ("run --launcher nosuch --store {store}", "nosuch"),
    ("run --nodes 0 --store {store}", "nodes"),
    ("run --devices-per-node 0 --store {store}", "devices-per-node"),
    ("run --rendezvous-timeout nan --store {store}", "rendezvous"),
    ("run --store {dir}/notes.txt/x.db", "cannot open the store"),
    ("run -f fake --store {dir}/not_a_store.db", "cannot open the store"),
    ("run --bogus-option", "No such option"),
    ("run -f fake -m wide_deep --param vocab=lots --store {store}", "a value is a whole number"),
    ("run -f fake -m wide_deep --param vocab=-1 --store {store}", "a value is a whole number"),
    ("run -f fake -m wide_deep --param vocab=0 --store {store}", "vocab must be at least 1"),
    ("run -f fake -m wide_deep --param vocab --store {store}", "NAME=VALUE"),
    ("run -f fake -m wide_deep --param vocab=1K --param vocab=2K --store {store}", "given twice"),
    # MLPerf's workloads (#47)
    ("run -m llama_tiny --lora 0 --store {store}", "--lora"),
    ("run -m moe_tiny --lora 8 --store {store}", "has no parameter lora"),
    ("run -m llama_tiny --lora 8 --scale 1n2c --tensor-parallel 2 --force --store {store}", "tensor or pipeline"),
    ("run -m llama_tiny --lora 8 --param lora_dropout=100 --store {store}", "lora_dropout"),
    ("run -m dlrm_tiny --param dist=3 --store {store}", "dist must be one of 0, 1"),
    ("run -m dlrm_tiny --scale 1n2c --strategy allreduce --force --store {store}", "use --strategy ddp"),
    ("run -f fake -m wide_deep --param vocab=max,1K --store {store}", "alone"),
    ("run -f fake -m wide_deep --param vocab=max --device cpu --store {store}", "needs --memory-limit"),
    ("run -f fake -m wide_deep --param sparse=max --memory-limit 1G --store {store}", "cannot be searched"),
    ("run -f fake -m resnet50 --param vocab=1K --store {store}", "has no parameter vocab"),
    ("run -f fake -m wide_deep --param sparse=3 --store {store}", "sparse must be one of 0, 1"),
    ("run -f fake -m wide_deep --param vocab=99999999999 --store {store}", "case parameter vocab"),
    # sweep
    ("sweep nosuchsuite --store {store}", "nosuchsuite"),
    ("sweep {dir}/bomb.yaml --dry-run --store {store}", "alias"),
    ("sweep {dir}/deep.yaml --dry-run --store {store}", "nested more than"),
    ("sweep {dir}/deepmap.yaml --dry-run --store {store}", "nested more than"),
    ("sweep {dir}/binary.yaml --dry-run --store {store}", "binary file"),
    ("sweep {dir}/latin1.yaml --dry-run --store {store}", "not UTF-8"),
    ("sweep {dir}/huge.yaml --dry-run --store {store}", "larger than"),
    ("sweep {dir}/inf.yaml --dry-run --store {store}", "finite"),
    ("sweep {dir}/nan.yaml --dry-run --store {store}", "finite"),
    ("sweep {dir}/neg.yaml --dry-run --store {store}", "timeout"),
    ("sweep {dir}/launcher.yaml --dry-run --store {store}", "unknown launcher 'nosuch'"),
    ("sweep {dir}/model.yaml --dry-run --store {store}", "resnet51"),
    ("sweep {dir}/framework.yaml --dry-run --store {store}", "caffe"),
    ("sweep {dir}/batch.yaml --dry-run --store {store}", "batch"),
    ("sweep {dir}/precision.yaml --dry-run --store {store}", "axes.precision[0]"),
    ("sweep {dir}/scale.yaml --dry-run --store {store}", "scale"),
    ("sweep {dir}/unknownkey.yaml --dry-run --store {store}", "unknown key"),
    ("sweep {dir}/noaxes.yaml --dry-run --store {store}", "axes"),
    ("sweep {dir}/list.yaml --dry-run --store {store}", "mapping"),
    ("sweep {dir}/scalar.yaml --dry-run --store {store}", "mapping"),
    ("sweep {dir}/empty.yaml --dry-run --store {store}", "mapping"),
    ("sweep {dir}/invalid.yaml --dry-run --store {store}", "not valid YAML"),
    ("sweep {dir}/tabs.yaml --dry-run --store {store}", "not valid YAML"),
    ("sweep {dir}/python.yaml --dry-run --store {store}", "not valid YAML"),
    ("sweep {dir}/memory.yaml --dry-run --store {store}", "memory"),
    ("sweep {dir}/inputsize.yaml --dry-run --store {store}", "input_size"),
    ("sweep {dir}/a_folder.yaml --dry-run --store {store}", "no suite"),
    ("sweep {dir}/params.yaml --dry-run --store {store}", "params.vocab: a value is a whole number"),
    ("sweep {dir}/paramname.yaml --dry-run --store {store}", "no model of the suite declares vocab"),
    ("sweep {dir}/parammax.yaml --dry-run --store {store}", "sparse cannot be searched"),
    ("sweep {dir}/good.yaml --only colour=red --dry-run --store {store}", "colour"),
    ("sweep {dir}/good.yaml --only model --dry-run --store {store}", "AXIS=V"),
    ("sweep {dir}/good.yaml --resume nosuchrun --store {store}", "nosuchrun"),
    ("sweep {dir}/good.yaml --memory-limit lots --dry-run --store {store}", "memory size"),
    ("sweep {dir}/good.yaml --dry-run --store {dir}/not_a_store.db", "not a dlbench store"),
    # results
    ("results nope --store {store}", "no run 'nope'"),
    ("results --last 0 --store {store}", "last"),
    ("results --format xml --store {store}", "format"),
    ("results --store {dir}/missing.db", "no store"),
    ("results --store {dir}/not_a_store.db", "not a dlbench store"),
    ("results --verify nope --store {store}", "no run 'nope'"),
    # report
    ("report nope --store {store}", "no run 'nope'"),
    ("report --format pdf --store {store}", "format"),
    ("report --last 0 --store {store}", "last"),
    ("report -o {dir}/nowhere/r.html --store {store}", "nowhere"),
    ("report -o {dir}/a_folder.yaml --store {store}", "a_folder.yaml"),
    ("report --store {dir}/missing.db", "no store"),
    ("report --store {dir}/not_a_store.db", "not a dlbench store"),
    # compare
    ("compare nope {run} --store {store}", "no run 'nope'"),
    ("compare {run} nope --store {store}", "no run 'nope'"),
    ("compare {run} {run} --fail-above lots --store {store}", "must look like 5%"),
    ("compare {run} {run} --min-effect lots --store {store}", "must look like 5%"),
    ("compare {run} --store {store}", "RUN_B"),
    ("compare --by version nope --store {store}", "no run 'nope'"),
    ("compare --by release {run} --store {store}", "'release' is not one of"),
    ("bisect -m resnet50 --versions 1.0,2.0 --store {store}", "--framework"),
    ("bisect -f fake -m resnet50 --versions 1.0 --store {store}", "two releases or more"),
    ("bisect -f fake -m resnet50 --versions 2.0..1.0 --store {store}", "must be older than the second"),
    ("bisect -f jax==0.10.1 -m resnet50 --versions 1.0,2.0 --store {store}", "bisect follows one framework"),
    ("compare {run} {run} --store {dir}/not_a_store.db", "not a dlbench store"),
    # history
    ("history --since forever --store {store}", "since"),
    ("history --since -3d --store {store}", "since"),
    ("history --min-effect lots --store {store}", "must look like 5%"),
    ("history -m resnet51 --store {store}", "resnet51"),
    ("history -f caffe --store {store}", "caffe"),
    ("history --store {dir}/not_a_store.db", "not a dlbench store"),
    # store push / pull
    ("store push nope --to {dir}/other.db --store {store}", "no run 'nope'"),
    ("store push {run} --store {store}", "--to"),
    ("store push {run} --to mysql://x@y/z --store {store}", "mysql"),
    ("store pull nope --from {store} --store {dir}/other.db", "no run 'nope'"),
    ("store push {run} --to {dir}/not_a_store.db --store {store}", "cannot open the store"),
    # setup, data, reference, env, list
    ("setup caffe", "caffe"),
    ("setup torch --python {dir}/no/python", "python"),
    ("setup torch --python 3.x", "unknown Python version"),
    ("setup torch --python 3.99", "too new for torch"),
    ("setup torch --python 2.7", "too old for torch"),
    ("setup mxnet --python 3.12", "too new for mxnet"),
    ("setup torch --existing {dir}/notes.txt", "not a working Python"),
    ("setup mxnet --existing", "has no mxnet"),
    ("setup torch --existing --python 3.11", "--existing"),
    ("setup mxnet --cuda", "Hopper no, Blackwell no"),
    ("setup paddle --cuda", "--index-url"),
    ("setup paddle --cuda --index-url nonsense", "not a package index URL"),
    ("data imagenet --out {dir}/img --images 0", "images"),
    ("data imagenet --out {dir}/img --min-side 8", "min-side"),
    ("data imagenet --out {dir}/img --min-side 300 --max-side 200", "side"),
    ("data imagenet", "--out"),
    ("data text --out {dir}/txt --samples 0", "samples"),
    ("data text --out {dir}/txt {dir}/no_such_corpus.txt", "no_such_corpus"),
    ("reference show nosuchsource", "nosuchsource"),
    ("reference show -p fp8", "precision"),
    ("reference show -b 0", "batch"),
    ("reference convergence -m nosuch", "nosuch"),
    ("reference measure-convergence -m face --store {store}", "face has no convergence target"),
    ("reference measure-convergence -m gpt --param bogus=3 --store {store}", "bogus"),
    ("reference measure-convergence -m gpt --runs 3 --store {store}", "--runs"),
    ("env --device tpu", "device"),
    ("list --colour", "No such option"),
    ("frobnicate", "No such command"),
    # telemetry: --wait-quiet and --price-per-hour (run and sweep)
    ("run -f fake --wait-quiet nan --store {store}", "finite"),
    ("run -f fake --price-per-hour 0 --store {store}", "price-per-hour"),
    ("sweep {dir}/good.yaml --wait-quiet inf --store {store}", "finite"),
    # rerun (numbers-a, issue 24 item 10)
    ("rerun nope --store {store}", "no run 'nope'"),
    ("rerun {run} --min-effect lots --store {store}", "5%"),
    ("rerun {run} --store {dir}/not_a_store.db", "cannot open the store"),
    # issue 24 (numbers-b): an input smaller than the architecture takes; table columns that do not exist
    ("run -f fake -m resnet50 --input-size 5 --store {store}", "--input-size 5 is too small for resnet50"),
    ("run -f fake -m inception_v3 --input-size 64 --store {store}", "takes at least 75"),
    ("run -f fake --columns framework,colour --store {store}", "unknown column colour"),
    ("results --columns nope --store {store}", "unknown column nope"),
    # reliability (#25): output files, bounds, secrets, empty paths, empty values, duplicate keys, resume
    ("report -o {dir}/pipe.html --store {store}", "is a FIFO"),
    ("report --format md -o {dir}/user.md --store {store}", "dlbench did not make it"),
    ("run -f fake --scale 1n100000c --store {store}", "pass --force"),
    ("run -f fake --threads 100000 --store {store}", "pass --force"),
    ("sweep {dir}/hugescale.yaml --dry-run --store {store}", "pass --force"),
    ("run -f fake --store ''", "the store path is empty"),
    ("results --store ''", "the store path is empty"),
    ("store push {run} --to '' --store {store}", "the store path is empty"),
    ("results --store 'host=db.example.org password=s3cret dbname=x'", "libpq keyword string"),
    ("run -f fake --store postgresql://bench:ret@99@db.example.org/x", "more than once"),
    ("run -f fake -m wide_deep --param vocab=1K,,2K --store {store}", "empty value"),
    ("sweep {dir}/dupkey.yaml --dry-run --store {store}", "given twice"),
    ("sweep --resume --store {store}", "--resume takes the id"),
    ("sweep --resume nosuchrun --store {dir}/new.db", "no run 'nosuchrun'"),
    # GPT layouts (#23)
    ("run -f fake -m gpt --scale 1n4c --tensor-parallel 3 --store {store}", "do not divide by 3 x 1"),
    ("run -f fake -m gpt --micro-batches 2 --store {store}", "with --pipeline-parallel 2"),
    (
        "run -f fake -m gpt --scale 1n2c --pipeline-parallel 2 --micro-batches 3 -b 4 --store {store}",
        "multiple of --micro-batches",
    ),
    ("run -f fake -m gpt --tensor-parallel 0 --store {store}", "tensor-parallel"),
    ("run -f fake -m gpt --param hidden=100 --param heads=3 --store {store}", "multiple of heads"),
    ("run -f fake -m gpt --schedule zb --store {store}", "schedule"),
    ("sweep --resume {run} --launcher slurm --store {store}", "--launcher with --resume"),
    ("sweep dlperf-gpt-cpu --launcher nosuch --store {store}", "launcher"),
    # gradient strategies (#22): --bucket-mb only where there are buckets, and a whole number
    ("run -f fake --scale 1n2c --strategy allreduce --bucket-mb 5 --store {store}", "has no buckets"),
    ("run -f fake --scale 1n2c --strategy ddp --bucket-mb 0 --store {store}", "bucket-mb"),
    ("run -f fake --scale 1n2c --strategy warp-drive --store {store}", "warp-drive"),
    # MLPerf v6.0's DiT and MoE members (#48): shapes and layouts they cannot take
    ("run -f torch -m dit_tiny --scale 1n2c --tensor-parallel 2 --store {store}", "not split over tensor or pipeline"),
    ("run -f torch -m dit_tiny --scale 1n2c --fsdp --strategy ddp --store {store}", "leave --strategy at none"),
    ("run -f torch -m dit_tiny --param heads=8 --store {store}", "multiple of 32"),
    ("run -f torch -m dit_tiny --input-size 15 --store {store}", "multiple of the patch"),
    ("run -f torch -m deepseek_tiny --param groups=3 --store {store}", "groups (3) must divide experts"),
    ("run -f torch -m gpt_oss_tiny --param head_dim=15 --store {store}", "head_dim (15) must be even"),
    # check same-model (#45): refused before any framework runs
    ("check same-model", "--model"),
    ("check same-model -m resnet51", "unknown model"),
    ("check same-model -m resnet50 -f caffe", "unknown framework"),
    ("check same-model -m resnet50 -f ,", "names no framework"),
    ("check same-model -m resnet50 --batch 1", "batch"),
    ("check same-model -m resnet50 --input-size 8", "too small"),
    ("check same-model -m bert_base --input-size 4096", "larger than"),
    ("check nope", "No such command"),
]
