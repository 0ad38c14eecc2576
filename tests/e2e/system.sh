#!/usr/bin/env bash
# Runs the whole-system test hack/e2e.sh (Helm chart, operator, autoscaler and a real engine against
# a loopback control plane) for hack/run-tests.sh, which runs every tests/e2e/*.sh. Its output is
# shown as is; its "e2e: N passed, M failed" line is relayed as the last line,
# "system: N passed, M failed" (one failure when it ended without a summary, e.g. killed). Exit
# status: hack/e2e.sh's, or 1 when the summary is missing.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$(mktemp /tmp/cinfer-system-e2e-out.XXXXXX)"
trap 'rm -f "$out"' EXIT
trap 'exit 143' TERM

bash "$root/hack/e2e.sh" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
line="$(grep -E '^e2e: [0-9]+ passed, [0-9]+ failed$' "$out" | tail -n1)"
if [ -z "$line" ]; then
	echo "not ok - hack/e2e.sh ended (exit $rc) without its summary line"
	echo "system: 0 passed, 1 failed"
	exit 1
fi
echo "system: ${line#e2e: }"
exit "$rc"
