#!/usr/bin/env bash
# Rules of the source tree that the compiler does not check (run by ctest as
# SourceRules; docs/architecture.md explains them):
#  1. A folder includes only from itself and the folders below it
#     (spec < runtime < io, schedules < generators < autoscheduler < apps;
#     generators may include io: the kernel cache writes files atomically;
#     bench and test may include anything).
#  2. Only spec/environment.cpp reads the environment (getenv).
# Prints each violation as file:line and exits 1 if there is any.
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2

# What each production folder may include besides itself.
declare -A below=(
  [spec]=""
  [runtime]="spec"
  [io]="spec runtime"
  [schedules]="spec runtime"
  [generators]="spec runtime io schedules"
  [autoscheduler]="spec runtime schedules generators"
  [apps]="spec runtime io schedules generators autoscheduler"
)

bad=0
for folder in "${!below[@]}"; do
  [ -d "$folder" ] || { echo "check_sources: no folder '$folder' (update the table in $0)"; bad=1; continue; }
  while IFS= read -r hit; do
    file=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}
    target=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"$rest")
    [ "$target" = "$folder" ] && continue
    case " ${below[$folder]} " in *" $target "*) continue ;; esac
    [ -d "$target" ] || continue  # a generated header's folder (tiny_cnn_step.h has none)
    echo "$file:$line: $folder/ includes $target/, which is not below it"
    bad=1
  done < <(grep -rnE '^#include "[a-z_]+/' "$folder" --include='*.cpp' --include='*.h')
done

while IFS= read -r hit; do
  echo "${hit%%:*}:$(cut -d: -f2 <<<"$hit"): getenv outside spec/environment.cpp (add a function to spec/environment.h)"
  bad=1
done < <(grep -rnE '\bgetenv\s*\(' "${!below[@]}" --include='*.cpp' --include='*.h' 2>/dev/null |
         grep -v '^spec/environment.cpp:')

if [ $bad -eq 0 ]; then echo "check_sources: includes run downward; the environment is read in one place"; fi
exit $bad
