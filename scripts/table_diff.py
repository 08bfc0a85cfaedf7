#!/usr/bin/env python3
"""What changed between two versions of a tuning table (docs/cost-model.md,
"Tables regenerated with moec-cost-3").

For every selection of NEW: its keys, the keys whose configuration changed
and, for those, the predicted time of the old and the new configuration
under NEW's model. NEW's rows give the new configuration's time; the old
one's comes from the predictions CSV `moec tune --predictions` wrote with
NEW (scripts/regenerate-tables.sh: build/tuning/NAME.predictions.csv),
which holds every surviving candidate's time at every key. An old
configuration that is no candidate of the new search has no time there
(printed "-").

usage: table_diff.py OLD NEW [--predictions CSV] [--top N]
exit 0, or 2 on a file it cannot read.
"""
import argparse
import csv
import sys


def selection_key(fields):
    """The tuner's name of a selection ("flash ep4 ws1024")."""
    return f"{fields['network']} ep{fields['ep']} ws{fields['workspace']}"


def parse_fields(words):
    return dict(word.split("=", 1) for word in words if "=" in word)


def read_table(path):
    """{selection: {m: (config, model, predicted_us)}} in file order."""
    selections = {}
    current = None
    with open(path) as f:
        for number, line in enumerate(f, 1):
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            if words[0] == "select":
                current = selections.setdefault(
                    selection_key(parse_fields(words[1:])), {})
            elif words[0] == "row":
                if current is None:
                    raise ValueError(f"{path}:{number}: row before any select")
                fields = parse_fields(words[1:])
                predicted = fields.get("predicted_us")
                current[int(fields["m"])] = (
                    fields["config"], fields.get("model", ""),
                    float(predicted) if predicted is not None else None)
    return selections


def read_predictions(path):
    """{(selection, m, candidate): predicted_us}."""
    with open(path, newline="") as f:
        return {(row["selection"], int(row["m"]), row["candidate"]):
                float(row["predicted_us"]) for row in csv.DictReader(f)}


def diff_tables(old, new, predictions):
    """Per selection of `new`: its key count and one change per key whose
    configuration differs from `old`'s at the same key. A change is
    (m, old config, new config, old config's predicted time under the new
    model or None, the new config's)."""
    result = {}
    for selection, rows in new.items():
        before = old.get(selection, {})
        changes = []
        for m, (config, _, predicted) in rows.items():
            if m not in before or before[m][0] == config:
                continue
            old_config = before[m][0]
            changes.append((m, old_config, config,
                            predictions.get((selection, m, old_config)),
                            predicted))
        result[selection] = (len(rows), changes)
    return result


def model_names(table):
    return sorted({model for rows in table.values()
                   for _, model, _ in rows.values() if model})


def report(name, old, new, diff, top):
    """The summary text of one table."""
    lines = []
    keys = sum(count for count, _ in diff.values())
    changed = [(selection, change) for selection, (_, changes) in diff.items()
               for change in changes]
    lines.append(f"{name}: {len(changed)} of {keys} keys changed configuration "
                 f"({', '.join(model_names(old)) or '?'} -> "
                 f"{', '.join(model_names(new)) or '?'})")
    for selection, (count, changes) in diff.items():
        if changes:
            configs = sorted({(c[1], c[2]) for c in changes})
            lines.append(f"  {selection}: {len(changes)} of {count} keys, "
                         f"{len(configs)} distinct old -> new pairs")
    timed = [(selection, change) for selection, change in changed
             if change[3] is not None and change[4] is not None]
    timed.sort(key=lambda item: item[1][4] - item[1][3])
    if timed:
        gains = sorted((new_us - old_us) / old_us
                       for _, (_, _, _, old_us, new_us) in timed)
        lines.append(f"  predicted change at the changed keys (new model): "
                     f"median {gains[len(gains) // 2]:+.1%}, "
                     f"largest {gains[0]:+.1%}")
        lines.append(f"  largest predicted gains (new model, old config -> "
                     f"new config), {min(top, len(timed))} of {len(timed)}:")
        for selection, (m, old_config, new_config, old_us, new_us) in timed[:top]:
            lines.append(f"    {selection} m={m}: {old_config} {old_us:.1f} us "
                         f"-> {new_config} {new_us:.1f} us "
                         f"({(new_us - old_us) / old_us:+.1%})")
    untimed = len(changed) - len(timed)
    if untimed:
        lines.append(f"  {untimed} changed keys whose old configuration is no "
                     f"candidate of the new search")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--predictions",
                        help="NEW's `moec tune --predictions` CSV")
    parser.add_argument("--top", type=int, default=5,
                        help="largest predicted differences to list")
    args = parser.parse_args(argv)
    try:
        old = read_table(args.old)
        new = read_table(args.new)
        predictions = (read_predictions(args.predictions)
                       if args.predictions else {})
    except (OSError, ValueError, KeyError) as error:
        print(f"table_diff: {error}", file=sys.stderr)
        return 2
    print(report(args.new, old, new, diff_tables(old, new, predictions),
                 args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
