"""Functions of bench/torch_import.sh (and tests/imports_invisible.rs): a seeded PyTorch CPU
training step, and the time `import torch` takes where it is called."""


def train_step(seed=0):
    """One seeded step of a small model: forward, backward, SGD. Every number it returns is
    exact, so a run under lfm must return the same ones."""
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    inputs, targets = torch.randn(32, 8), torch.randn(32, 2)
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return {
        "torch": torch.__version__,
        "losses": losses,
        "parameters": [p.detach().flatten().tolist() for p in model.parameters()],
    }


def timed_import():
    """Seconds `import torch` took here (torch not loaded before)."""
    import sys
    import time

    assert "torch" not in sys.modules, "torch was loaded before the call"
    started = time.perf_counter()
    import torch  # noqa: F401

    return time.perf_counter() - started
