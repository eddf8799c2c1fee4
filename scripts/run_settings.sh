# Sourced by scripts/ui.sh: the settings the home's last `prag materialize` run had from PRAG__ variables, recorded
# in $PRAG_HOME/run_settings.env by prag_assets/cli/run_graph.py, so that the UI's definitions are the configuration
# the home's tables were made with (no asset "Unsynced" by a setting given to one run, and a materialization launched
# from the UI runs the same configuration; issue 50). A variable already set in this shell wins.
if [ -f "$PRAG_HOME/run_settings.env" ]; then
  while IFS= read -r line; do
    name="${line%%=*}"
    if [ -n "$name" ] && [ -z "${!name+x}" ]; then eval "export $line"; fi
  done < "$PRAG_HOME/run_settings.env"
fi
