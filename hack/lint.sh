#!/usr/bin/env bash
# Structural checks of `make lint` (after clang-format and the banned-function grep), over the files
# git tracks. Prints every violation with its file and line and exits 1 when there is one.
#
# 1. One copy of each primitive (STYLE.md "Habits that cost us"). A second copy is refused by the
#    name or the call it cannot do without:
#      - strict UTF-8 validation: common/utf8.c only (no other function named *utf8*valid*,
#        *utf8*check*, *utf8*seq*, *utf8*invalid*);
#      - binary heaps: common/heap.h only (no function named *heap_push, *heap_pop, *sift_up,
#        *sift_down, *heapify; HEAP_DEFINE generates them);
#      - JSON path getters: common/json_util.c only (no static function named *_at or *_str whose
#        first parameter is a const json_t *);
#      - error-message formatting: vsnprintf only in common/err.c (err_fmt, the error formatter),
#        common/buf.c (buf_printf), common/log.c (log lines) and autoscaler/policy.c (a scaling
#        decision's reason, not an error).
# 2. No include cycle between the folders of engine/ (engine/main.c counts as folder "main"): an
#    edge A -> B for every '#include "engine/B/..."' in a file under engine/A/; any cycle fails,
#    printed with one include line per edge.
set -uo pipefail
cd "$(dirname "$0")/.."

status=0
src_files() { git ls-files -- 'common/*.[ch]' 'engine/*.[ch]' 'engine/*.cu' 'operator/*.[ch]' \
	'autoscaler/*.[ch]' 'router/*.[ch]'; }

# ban REGEX ALLOWED_FILE_REGEX MESSAGE
ban() {
	local hits
	hits=$(src_files | grep -vE "$2" | xargs grep -nE "$1" 2>/dev/null)
	if [ -n "$hits" ]; then
		echo "$hits"
		echo "lint: $3"
		status=1
	fi
}

# Definitions start at column 0 with a type; calls and declarations inside functions are indented.
def='^[a-z][a-z0-9_ *]*[ *]'
ban "${def}[a-z0-9_]*utf8[a-z0-9_]*(valid|check|seq|invalid)[a-z0-9_]*[[:space:]]*\(" \
	'^common/utf8\.[ch]$' \
	'a second UTF-8 validator: use common/utf8.h (utf8_seq_check, utf8_invalid_at, utf8_valid)'
ban "${def}([a-z0-9_]*_)?(heap_push|heap_pop|sift_up|sift_down|heapify)[[:space:]]*\(" \
	'^common/heap\.h$' \
	'a second binary heap: use HEAP_DEFINE from common/heap.h'
ban '^static [a-z0-9_ *]*[ *]([a-z0-9_]*_)?(at|str)[[:space:]]*\(const json_t \*' \
	'^common/json_util\.c$' \
	'a second JSON path getter: use json_util_at / json_util_str_at / json_util_int_at (common/json_util.h)'
ban '\bvsnprintf[[:space:]]*\(' \
	'^(common/err\.c|common/buf\.c|common/log\.c|autoscaler/policy\.c)$' \
	'a second error formatter: use err_fmt / err_vfmt (common/err.h)'

# Include cycles between engine folders: edges, then a depth-first search for a back edge.
edges=$(git ls-files -- 'engine/*.[ch]' 'engine/*.cu' | while read -r f; do
	from=$(cut -d/ -f2 <<<"$f")
	[ "$f" = engine/main.c ] && from=main
	grep -nE '^#include "engine/[a-z0-9_]+/' "$f" | while IFS= read -r line; do
		to=$(sed -E 's|^[0-9]+:#include "engine/([a-z0-9_]+)/.*|\1|' <<<"$line")
		[ "$to" != "$from" ] && echo "$from $to $f:${line%%:*}"
	done
done)
cycle=$(awk '
	{ if (!(($1, $2) in site)) { site[$1, $2] = $3; adj[$1] = adj[$1] " " $2 } nodes[$1]; nodes[$2] }
	function dfs(u,    i, n, next_, v) {
		state[u] = 1; path[++depth] = u
		n = split(adj[u], next_, " ")
		for (i = 1; i <= n; i++) {
			v = next_[i]
			if (state[v] == 1) { report(v); return 1 }
			if (!state[v] && dfs(v)) return 1
		}
		state[u] = 2; depth--
		return 0
	}
	function report(v,    i, start) {
		for (i = 1; i <= depth; i++) if (path[i] == v) start = i
		for (i = start; i <= depth; i++) {
			w = (i < depth) ? path[i + 1] : v
			printf "  engine/%s -> engine/%s (%s)\n", path[i], w, site[path[i], w]
		}
	}
	END { for (u in nodes) if (!state[u] && dfs(u)) exit 0 }
' <<<"$edges")
if [ -n "$cycle" ]; then
	echo "$cycle"
	echo "lint: include cycle between engine folders (engine/README.md: each folder includes only those below it)"
	status=1
fi

[ "$status" -eq 0 ] && echo "lint: primitives and engine folder includes ok"
exit "$status"
