"""Writing fastdecode/triton_kernels/tile_table.json from a sweep (--record): one entry per GPU and
shape, replaced when the shape is measured again, with where it came from."""
import json

from bench_decode import run_stamp


def record(path, section, gpu, key, entry, cmd):
    """Put entry ({**key, **entry} plus date, commit, command) into section[gpu] of the table at
    path, replacing the entry of the same key (e.g. {"N": .., "K": ..})."""
    with open(path) as f:
        table = json.load(f)
    stamp, commit = run_stamp()
    rows = [e for e in table.setdefault(section, {}).get(gpu, [])
            if any(e.get(k) != v for k, v in key.items())]
    rows.append({**key, **entry, "commit": commit, "date": stamp, "command": cmd})
    table[section][gpu] = sorted(rows, key=lambda e: tuple(e[k] for k in key))
    with open(path, "w") as f:
        json.dump(table, f, indent=1)
        f.write("\n")
