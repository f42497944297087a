#!/bin/sh
# Summarize automake's test results (tests/*.trs) in one line, after
# listing any failures and skips with their reasons. A failure shows the last
# 25 lines of its log, so that a run whose files are gone (CI) still says why.
cd "$(dirname "$0")/.."
pass=0 fail=0 skip=0
for trs in $(find tests -name '*.trs' | sort); do
    result=$(sed -n 's/^:test-result: //p' "$trs" | head -1)
    log=${trs%.trs}.log
    case $result in
    PASS | XFAIL) pass=$((pass + 1)) ;;
    SKIP) skip=$((skip + 1)); echo "skipped ${trs%.trs}: $(grep '^SKIP: ' "$log" 2>/dev/null | tail -1 | cut -c7-)" ;;
    *)
        fail=$((fail + 1))
        echo "failed ${trs%.trs} (see $log); its last lines:"
        tail -n 25 "$log" 2>/dev/null | sed 's/^/    | /'
        ;;
    esac
done
echo "$pass passed, $fail failed, $skip skipped"
