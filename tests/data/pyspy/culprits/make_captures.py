"""Real py-spy dumps of processes blocked where a hung rank's culprit blocks: a request to a server
that never answers (TRL's VLLMClient.generate, requests.post from a reward function), a DataLoader
whose worker never delivers, a dataset's __getitem__ that never returns. Each scenario runs in a
child process (`python make_captures.py SCENARIO`) that says "ready" once its imports are done; 3 s later
`py-spy dump --pid PID` is written to SCENARIO.txt beside this file.

    .venv/bin/python tests/data/pyspy/culprits/make_captures.py
"""
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIOS = ("vllm_client_generate", "requests_in_reward", "dataloader_worker", "dataloader_inline")


def silent_server() -> str:
    """A server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []
    threading.Thread(target=lambda: [held.append(server.accept()) for _ in iter(int, 1)], daemon=True).start()
    return f"http://127.0.0.1:{server.getsockname()[1]}"


def rollout(client, prompts):
    return client.generate(prompts, n=2, max_tokens=8)


def vllm_client_generate() -> None:
    import requests
    from trl.generation.vllm_client import VLLMClient

    client = VLLMClient.__new__(VLLMClient)  # __init__ asks for vLLM and the server's health; the server is silent
    client.session, client.base_url, client.model = requests.Session(), silent_server(), "tiny"
    rollout(client, ["1+1=", "2+2="])


def remote_reward(completions, url):
    import requests

    return requests.post(f"{url}/score", json={"completions": completions}).json()["scores"]


def requests_in_reward() -> None:
    remote_reward(["2", "4"], silent_server())


class SlowDataset:
    def __len__(self):
        return 8

    def __getitem__(self, index):
        if index >= 2:
            while True:  # a sample that never loads (a network file system, a lock)
                time.sleep(1.0)
        return index


def train_loop(loader):
    for _batch in loader:
        pass


def dataloader_worker() -> None:
    from torch.utils.data import DataLoader

    train_loop(DataLoader(SlowDataset(), batch_size=2, num_workers=1, timeout=0))


def dataloader_inline() -> None:
    from torch.utils.data import DataLoader

    train_loop(DataLoader(SlowDataset(), batch_size=2, num_workers=0))


def main() -> None:
    if len(sys.argv) > 1:
        import requests  # noqa: F401  (imports first: the dump must show the blocked call, not an import)
        import torch.utils.data  # noqa: F401
        import trl.generation.vllm_client  # noqa: F401

        print("ready", flush=True)
        globals()[sys.argv[1]]()
        return
    for name in SCENARIOS:
        child = subprocess.Popen([sys.executable, __file__, name], stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "ready", name
            time.sleep(3.0)
            spy = Path(sys.executable).with_name("py-spy")
            dump = subprocess.run([str(spy), "dump", "--pid", str(child.pid)], capture_output=True, text=True,
                                  timeout=30)
            (HERE / f"{name}.txt").write_text(f"$ py-spy dump --pid {child.pid}\n" + dump.stdout)
        finally:
            child.kill()
            child.wait()


if __name__ == "__main__":
    main()
