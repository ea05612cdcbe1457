# scripts/test.sh's verdict over its phases (sourced; tests/scripts/test_phases.py runs it alone).
# phases_exit NAME=RC ...: each phase's pytest exit status. A phase fails the suite on any non-zero
# status, pytest's 5 (nothing collected) included: a phase emptied by a marker or path typo ran no test,
# and a green suite must mean that every phase ran. Returns the first failing phase's status, else 0.
phases_exit() {
  local phase name rc first=0
  for phase in "$@"; do
    name=${phase%%=*} rc=${phase#*=}
    if [[ $rc == 5 ]]; then
      echo "phase '$name' ran no test (pytest exit 5: nothing collected; a marker or path typo?)" >&2
    elif [[ $rc != 0 ]]; then
      echo "phase '$name' failed (pytest exit $rc)" >&2
    fi
    if [[ $rc != 0 && $first == 0 ]]; then first=$rc; fi
  done
  return "$first"
}
