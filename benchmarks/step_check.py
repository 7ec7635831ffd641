"""Three GRPO steps on the tiny random model, printed so two code trees can be compared line by line.

Registers the tiny model (a random Llama with the SmolLM2 tokenizer, as the tests build it) on
`LocalBackend` with the embedded engine, samples 4 prompts x 4 seeded replies from the served step,
rewards them by length and trains; three times. Prints every numeric step metric (timings left out)
to 6 decimals and the sha256 of each file of each step's adapter (its config canonicalised: keys and
target modules sorted, the temporary folder replaced). A refactor that claims to change
nothing must print the same lines before and after:

    PYTHONPATH=$PWD python benchmarks/step_check.py > /tmp/before.txt     # on the old tree
    PYTHONPATH=$PWD python benchmarks/step_check.py > /tmp/after.txt      # on the new one
    diff /tmp/before.txt /tmp/after.txt

Pass ``--async`` to train with inference left open (``TrainConfig(mode="async")``).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import art_core as art  # noqa: E402
from art_train import LocalBackend  # noqa: E402
from art_train.models import build_tiny_model  # noqa: E402

PROMPTS = ["Name a colour.", "Count to three.", "Say hello.", "What is two plus two?"]


async def run(root: Path, async_training: bool) -> list[str]:
    base = build_tiny_model(root / "tiny")
    backend = LocalBackend(path=str(root / "art"), device="cpu")
    config = art.TrainConfig(learning_rate=1e-2, **({"mode": "async"} if async_training else {}))
    model = art.TrainableModel(name="check", project="bench", base_model=str(base),
                               config=art.ModelConfig(max_seq_len=256, seed=0))
    await model.register(backend)
    client = model.openai_client()
    lines: list[str] = []
    try:
        for step in range(3):
            async def one(prompt: str, i: int, step: int = step) -> art.Trajectory:
                with art.capture() as traj:
                    r = await client.chat.completions.create(
                        model=model.served_name(), messages=[{"role": "user", "content": prompt}],
                        max_tokens=12, temperature=1.0, seed=100 * step + i)
                traj.reward = float(len(r.choices[0].message.content or "") % 7)
                return traj

            groups = await art.gather_trajectory_groups(
                [art.TrajectoryGroup(one(p, i) for i in range(4)) for p in PROMPTS], show_progress=False)
            result = await model.train(groups, config=config, verbose=False)
            for key in sorted(result.metrics):
                value = result.metrics[key]
                if key.startswith("time/") or key.endswith("_per_s") or isinstance(value, bool):
                    continue
                if isinstance(value, int | float):
                    lines.append(f"step {result.step} {key} {value:.6f}")
            folder = Path(backend.service.entry("check").rundir.checkpoint_path(result.step))
            for f in sorted(folder.iterdir()):
                if f.name.startswith("adapter_"):
                    data = f.read_bytes()
                    if f.suffix == ".json":  # names a temp folder; peft writes target_modules in set order
                        adapter_config = json.loads(data.replace(str(root).encode(), b"<root>"))
                        adapter_config["target_modules"] = sorted(adapter_config.get("target_modules") or [])
                        data = json.dumps(adapter_config, sort_keys=True).encode()
                    lines.append(f"step {result.step} sha256 {f.name} {hashlib.sha256(data).hexdigest()}")
    finally:
        await backend.close()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--async", dest="async_training", action="store_true", help="async training mode")
    parser.add_argument("--smoke", action="store_true", help="also write the lines as JSON (to --out or a temp file)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        lines = asyncio.run(run(Path(tmp), args.async_training))
    for line in lines:
        print(line)  # noqa: T201 - a script's output
    if args.smoke or args.out:
        from _smoke import smoke_out

        smoke_out(args.out, "step_check.json").write_text(json.dumps({"lines": lines}, indent=1) + "\n")


if __name__ == "__main__":
    main()
