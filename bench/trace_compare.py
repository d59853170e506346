"""Where a change moved the time: the per-op wait / work per program of one decode step, for
traces of the same model (Chrome JSON from bench/trace_step.py or `python -m fastdecode trace`),
as a table and a grouped bar chart (trace.compare_png).

    python bench/trace_compare.py before.json after.json --labels fb60d46,45a0c05 \\
        --title "Llama-3.1-8B decode step" --png bench/results/waits_8b.png
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fastdecode import trace as tr  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("traces", nargs="+", help="Chrome trace JSON files, before first")
    p.add_argument("--labels", default=None, help="comma-separated, one per trace")
    p.add_argument("--title", default="")
    p.add_argument("--png", default=None)
    args = p.parse_args()
    labels = args.labels.split(",") if args.labels else [os.path.basename(t) for t in args.traces]
    if len(labels) != len(args.traces):
        p.error("one label per trace")
    named = [(lab, tr.load_chrome_json(t)) for lab, t in zip(labels, args.traces)]
    rows, spans = tr.compare(named)
    print(f"{args.title}: per program over the step, us (wait / work)")
    print(f"  {'op':9s}" + "".join(f"{lab:>20s}" for lab in labels))
    for op, vals in rows.items():
        print(f"  {op:9s}" + "".join(f"{w / 1e3:9.1f} /{k / 1e3:8.1f}" for w, k in vals))
    print(f"  {'step':9s}" + "".join(f"{s / 1e3:18.1f}  " for s in spans))
    if args.png:
        tr.compare_png(named, args.png, args.title)


if __name__ == "__main__":
    main()
