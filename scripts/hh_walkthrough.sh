#!/usr/bin/env bash
# A walkthrough of the gate on real data (`make hh-walkthrough`): import the HH-RLHF sample
# beside the repo, show the gate refusing the raw data, filter it, and publish a validated version.
set -euo pipefail
cd "$(dirname "$0")/.."
sample=${1:-../shared/data/hh-rlhf-harmless/test.jsonl.gz}
[ -f "$sample" ] || { echo "demo: sample $sample not found (set SAMPLE=path/to/hh-rlhf.jsonl.gz)" >&2; exit 2; }
prefdata=.venv/bin/prefdata
out=.prefdata/hh-walkthrough
mkdir -p "$out"

echo "== 1. import the HH-RLHF harmless sample (quarantine reasons, reconciled counts)"
$prefdata import "$sample" --name hh-harmless --card docs/examples/hh-harmless-card.md --json "$out/import.json"
draft=$(.venv/bin/python -c "import json,sys; print(json.load(open(sys.argv[1]))['version'])" "$out/import.json")

echo "== 2. the 12-point checklist on the raw data (it should fail: this is the gate working)"
if $prefdata check "$draft" --report-dir "$out/raw-report" --json "$out/raw-report.json"; then
  echo "demo: the raw sample unexpectedly passed the checklist" >&2; exit 1
fi

echo "== 3. filter: duplicates, length-ratio violations and degenerate pairs go to quarantine"
$prefdata filter "$draft" --json "$out/filter.json"
filtered=$(.venv/bin/python -c "import json,sys; print(json.load(open(sys.argv[1]))['version'])" "$out/filter.json")

echo "== 4. publish: the gate passes with the sample's stated waivers; the version becomes validated"
$prefdata publish "$filtered" --config docs/examples/hh-sample-checklist.yaml --report-dir "$out/report"
$prefdata verify "$filtered"
$prefdata versions hh-harmless
echo "reports: $out/report/report.html, $out/report/junit.xml, $out/report/gx/index.html"
