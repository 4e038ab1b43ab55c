#!/bin/bash
# public_headers.sh CC [CXX] - the public headers (include/vkt.h over its parts
# include/vkt/*.h; README, "The public headers") hold together (ctest: public_headers):
#  - each part, and vkt.h, compiles alone as the first include of a file: C11 and C99
#    with -Wall -Wextra -Wpedantic -Werror, and C++11 with CXX when given (extern "C");
#  - vkt.h includes every part and declares nothing itself: its preprocessed top-level
#    declarations equal the union of the parts';
#  - each declaration lives in exactly one part: a part's own declarations (less those of
#    the parts it includes) are disjoint from every other part's, and their counts sum to
#    vkt.h's;
#  - every VKT_API function is declared in exactly one file.
# Which functions the library exports against these declarations: tests/cli/install.sh.
set -u
CC=${1:?usage: public_headers.sh CC [CXX]}
CXX=${2:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
INC=$ROOT/include
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }

parts=$(cd "$INC" && ls vkt/*.h)
[ -n "$parts" ] || { echo "FAIL: no include/vkt/*.h"; exit 1; }

for h in vkt.h $parts; do
    printf '#include <%s>\nint main(void) { return 0; }\n' "$h" >"$TMP/t.c"
    for std in c11 c99; do
        check "$h compiles alone ($std -Wall -Wextra -Wpedantic -Werror): $(
            "$CC" -std=$std -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$INC" \
                  "$TMP/t.c" 2>&1 | head -3 | tr '\n' ' ')" \
            "'$CC' -std=$std -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I'$INC' '$TMP/t.c' 2>/dev/null"
    done
    if [ -n "$CXX" ]; then
        cp "$TMP/t.c" "$TMP/t.cpp"
        check "$h compiles alone as C++11: $(
            "$CXX" -std=c++11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$INC" \
                   "$TMP/t.cpp" 2>&1 | head -3 | tr '\n' ' ')" \
            "'$CXX' -std=c++11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I'$INC' '$TMP/t.cpp' 2>/dev/null"
    fi
done

# The top-level declarations of a header as the compiler sees them, one a line: the
# preprocessed text with its whitespace folded, cut at each ';' outside braces, sorted.
decls() {
    printf '#include <%s>\n' "$1" | "$CC" -std=c11 -E -P -I"$INC" -x c - |
        tr '\n\t' '  ' | awk 'BEGIN { RS = "\001" } {
            d = 0; cur = ""
            for (i = 1; i <= length($0); i++) {
                c = substr($0, i, 1); cur = cur c
                if (c == "{") d++; else if (c == "}") d--
                else if (c == ";" && d == 0) {
                    gsub(/  +/, " ", cur); sub(/^ /, "", cur); print cur; cur = ""
                }
            }
        }' | sort
}

decls vkt.h >"$TMP/all"
: >"$TMP/union"
: >"$TMP/own_all"
for h in $parts; do
    decls "$h" >"$TMP/decl"
    # the parts it includes, directly or not: their declarations are not its own
    : >"$TMP/below"
    for b in $(sed -nE 's/^#include "([a-z_]+\.h)"$/vkt\/\1/p' "$INC/$h"); do
        decls "$b" >>"$TMP/below"
    done
    sort -u "$TMP/below" -o "$TMP/below"
    comm -23 "$TMP/decl" "$TMP/below" >"$TMP/own"
    check "$h declares something of its own ($(wc -l <"$TMP/own"))" "[ -s '$TMP/own' ]"
    dup=$(sort "$TMP/own_all" "$TMP/own" | uniq -d | head -2 | cut -c1-80 | tr '\n' ' ')
    check "$h's own declarations appear in no other part${dup:+: $dup}" "[ -z '$dup' ]"
    cat "$TMP/own" >>"$TMP/own_all"
    cat "$TMP/decl" >>"$TMP/union"
done
sort -u "$TMP/union" -o "$TMP/union"
n_all=$(wc -l <"$TMP/all")
differ=$(comm -3 "$TMP/all" "$TMP/union" | head -2 | cut -c1-80 | tr '\n' ' ')
check "vkt.h's $n_all declarations are the union of its parts' ($(wc -l <"$TMP/union"))${differ:+: $differ}" \
    "cmp -s '$TMP/all' '$TMP/union'"
check "the parts' own declarations sum to vkt.h's ($(wc -l <"$TMP/own_all") vs $n_all)" \
    "[ $(wc -l <"$TMP/own_all") -eq $n_all ]"
for h in $parts; do
    check "vkt.h includes $h" "grep -q '#include \"$h\"' '$INC/vkt.h'"
done

(cd "$INC" && grep -oE '^VKT_API [^(]*\bvkt_[a-z0-9_]+\(' vkt.h $parts) |
    sed -E 's/^([^:]+):.*\b(vkt_[a-z0-9_]+)\($/\2 \1/' | sort >"$TMP/fns"
twice=$(cut -d' ' -f1 "$TMP/fns" | uniq -d | head -3 | tr '\n' ' ')
check "every VKT_API function is declared once ($(wc -l <"$TMP/fns") functions)${twice:+: twice: $twice}" \
    "[ -z '$twice' ] && [ -s '$TMP/fns' ]"
check "vkt.h itself declares no function" "! grep -q ' vkt.h$' '$TMP/fns'"
echo "public headers: $(for h in vkt.h $parts; do printf '%s %s, ' "$h" \
    "$(wc -l <"$INC/$h")"; done)$(wc -l <"$TMP/fns") functions, $n_all declarations"
echo "public_headers: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
