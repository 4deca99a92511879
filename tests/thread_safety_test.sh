#!/bin/sh
# Proves that the clang pass of scripts/test can fail: compiles
# tests/thread_safety_violations.cc with clang's -Wthread-safety
# -Werror=thread-safety, as that pass compiles the server. As it is the file
# must compile; with each HPO_VIOLATION_* defined it must not, and clang
# must name that violation.
#
#   tests/thread_safety_test.sh CLANGXX SOURCE_DIR
set -u
cxx="$1" src="$2"
file="$src/tests/thread_safety_violations.cc"
flags="-std=c++17 -fsyntax-only -Wthread-safety -Werror=thread-safety -I$src"
failed=0

# shellcheck disable=SC2086  # flags is a list of arguments
if ! out=$("$cxx" $flags "$file" 2>&1); then
  echo "FAIL: $file does not compile without a violation:"
  echo "$out"
  exit 1
fi
echo "ok: compiles without a violation"

check() {  # check NAME EXPECTED: -DHPO_VIOLATION_NAME must fail, saying EXPECTED
  # shellcheck disable=SC2086
  if out=$("$cxx" $flags "-DHPO_VIOLATION_$1" "$file" 2>&1); then
    echo "FAIL: HPO_VIOLATION_$1 compiled; expected: $2"
    failed=1
  elif ! printf '%s\n' "$out" | grep -F -- "$2" | grep -q -- "-Werror,-Wthread-safety"; then
    echo "FAIL: HPO_VIOLATION_$1 failed, but not with the error '$2':"
    echo "$out"
    failed=1
  else
    echo "ok: HPO_VIOLATION_$1 rejected: $2"
  fi
}
check GUARDED "reading variable 'n_' requires holding mutex 'mu_'"
check REQUIRES "calling function 'AddLocked' requires holding mutex 'mu_' exclusively"
check CONDVAR "calling function 'Wait' requires holding mutex 'mu_' exclusively"
check LEAK "mutex 'mu_' is not held on every path through here"
exit "$failed"
