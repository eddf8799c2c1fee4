# Sourced by scripts/demo.sh and scripts/ui.sh, so that the UI loads the configuration the demo ran with (issue 50):
# real PersonaBench / LongMemEval samples (developer machines only; a fresh clone has no ../shared/data). When
# present, `prag materialize` also runs the retrieval evaluation (asset group retrieval_eval).
if [ -z "${PRAG__DATA__REAL_DATA_DIR:-}" ] && [ -d "$PRAG_ROOT/../shared/data" ]; then
  PRAG__DATA__REAL_DATA_DIR="$(cd "$PRAG_ROOT/../shared/data" && pwd)"
  export PRAG__DATA__REAL_DATA_DIR
fi
