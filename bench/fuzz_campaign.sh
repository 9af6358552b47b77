#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A fuzzing campaign over both libFuzzer targets at their real limits, one after the other,
# with ASan + UBSan (bench/fuzz.sh builds them that way):
#
#   bench/fuzz_campaign.sh [RUNS] [TARGET...]   RUNS executions per target (default 1000000);
#                                               targets fuzz_npu_model fuzz_delegate (default both)
#
# FUZZ_CAMPAIGN_SECONDS (default 86400) caps each target's wall time, whichever comes first;
# FUZZ_CAMPAIGN_TIMEOUT (default 10) is libFuzzer's -timeout: a unit running longer is a finding
# that ends the target (slower than 10 s units are kept as slow-unit-* files without stopping).
#
# Prints one line per target: executions, coverage (libFuzzer's cov = edges, ft = features),
# wall seconds, peak RSS and findings (files the run added under the target's crashers/
# directory: a crash, sanitizer report, leak, timeout or OOM; each is replayed by
# `bench/fuzz.sh --replay` from then on). A target stops at its first finding.
# The full libFuzzer log of each target is kept in $FUZZ_BUILD_DIR/campaign_<target>.log.
# Same environment as bench/fuzz.sh; one fuzzing process at a time (the machine is shared).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RUNS=${1:-1000000}
shift || true
if ! [[ "$RUNS" =~ ^[0-9]+$ ]]; then
  echo "usage: bench/fuzz_campaign.sh [RUNS] [fuzz_npu_model|fuzz_delegate ...]" >&2
  exit 2
fi
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(fuzz_npu_model fuzz_delegate)
BUILD=${FUZZ_BUILD_DIR:-$ROOT/build/fuzz}
mkdir -p "$BUILD"
status=0
for target in "${TARGETS[@]}"; do
  case "$target" in
    fuzz_delegate) crashers=$ROOT/tests/runtime/corpus/crashers ;;
    fuzz_npu_model) crashers=$ROOT/tests/runtime/corpus_npu_model/crashers ;;
    *) echo "bench/fuzz_campaign.sh: unknown target $target" >&2; exit 2 ;;
  esac
  mkdir -p "$crashers"
  before=$(find "$crashers" -type f | sort)
  log=$BUILD/campaign_$target.log
  start=$(date +%s)
  FUZZ_TARGET=$target bash bench/fuzz.sh "${FUZZ_CAMPAIGN_SECONDS:-86400}" -runs="$RUNS" \
    -timeout="${FUZZ_CAMPAIGN_TIMEOUT:-10}" >"$log" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: //p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
  new=$(comm -13 <(echo "$before") <(find "$crashers" -type f | sort) | sed '/^$/d')
  nnew=$(echo -n "$new" | grep -c . || true)
  echo "$target: executions ${execs:-?} ${cov:-cov: ?} seconds $secs peak_rss_mb ${rss:-?}" \
    "findings $nnew exit $rc"
  if [ -n "$new" ]; then
    echo "$new" | sed 's/^/  finding: /'
  fi
  if [ "$rc" -ne 0 ] || [ "$nnew" -ne 0 ]; then
    status=1
    tail -40 "$log" | sed 's/^/  | /'
  fi
done
exit $status
