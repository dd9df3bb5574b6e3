"""The capstone's text, model, loss and sizes (d2l_extras/transformer.py); its job: test_capstone."""
from importlib import resources

import pytest
import torch
import torch.nn.functional as F

import d2l_extras as dx
from d2l_extras.transformer import GROWTH, training_bytes

GB = 10 ** 9
TEXT = "hello world, the time machine. " * 10


def small_model(checkpoint=0, seed=0):
    torch.manual_seed(seed)
    return dx.TinyGPT(vocab_size=11, seq_len=16, d_model=32, n_heads=4, n_layers=4,
                      checkpoint=checkpoint)


def batch(seed=0, B=3, T=16):
    g = torch.Generator().manual_seed(seed)
    X = torch.randint(0, 11, (B, T + 1), generator=g)
    return X[:, :-1], X[:, 1:]


# --- the text

def test_the_time_machine_ships_in_the_package():
    path = resources.files("d2l_extras") / "texts" / "timemachine.txt"
    assert path.is_file() and "Time Traveller" in path.read_text(encoding="utf-8")
    text = dx.load_text()
    assert len(text.text) > 170_000 and len(text.vocab) == 70
    assert text.vocab == sorted(set(text.text))


def test_the_text_is_declared_as_package_data():
    import tomllib
    with open("pyproject.toml", "rb") as f:
        data = tomllib.load(f)["tool"]["setuptools"]["package-data"]["d2l_extras.texts"]
    assert "*.txt" in data


def decode(text, ids):
    return "".join(text.vocab[i] for i in ids.tolist())


def test_the_ids_split_in_order():
    text = dx.transformer.CharText(TEXT)
    assert text.train.dtype == torch.long and decode(text, text.train[:8]) == TEXT[:8]
    assert decode(text, torch.cat([text.train, text.val])) == TEXT
    assert len(text.val) == int(len(TEXT) * 0.1)
    assert repr(text) == "CharText(310 characters, 16 distinct, train 279, val 31)"


def test_batch_windows_are_shifted_by_one_and_reproducible():
    text = dx.transformer.CharText(TEXT)
    X, Y = text.batch(5, 12, torch.Generator().manual_seed(3))
    assert X.shape == Y.shape == (5, 12) and X.dtype == Y.dtype == torch.int64
    assert torch.equal(X[:, 1:], Y[:, :-1])
    for x, y in zip(X, Y):   # each row is a window of the training text
        assert decode(text, torch.cat([x, y[-1:]])) in decode(text, text.train)
    X2, _ = text.batch(5, 12, torch.Generator().manual_seed(3))
    assert torch.equal(X, X2)


def test_a_window_longer_than_the_text_is_refused():
    text = dx.transformer.CharText(TEXT)
    with pytest.raises(ValueError, match="seq_len 300 needs more than the 279"):
        text.batch(2, 300, torch.Generator().manual_seed(0))



def lm_loss(model, X, Y):
    return F.cross_entropy(model(X).flatten(0, 1).float(), Y.flatten())

# --- the model

def test_model_shapes_and_loss_at_initialization():
    model = small_model()
    X, Y = batch()
    assert model(X).shape == (3, 16, 11)
    assert model(X[:, :5]).shape == (3, 5, 11)      # shorter sequences work
    loss = lm_loss(model, X, Y)
    # small initial weights: about uniform predictions, loss ln(11)
    assert loss.dim() == 0 and abs(loss.item() - torch.log(torch.tensor(11.0)).item()) < 0.1


def test_attention_is_causal():
    model = small_model()
    X, _ = batch()
    changed = X.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 11
    with torch.no_grad():
        a, b = model(X), model(changed)
    torch.testing.assert_close(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])


@pytest.mark.parametrize("every", [1, 2, 3])
def test_checkpointing_gives_the_same_loss_and_gradients(every):
    X, Y = batch()
    plain, ckpt = small_model(), small_model(checkpoint=every)
    losses = []
    for model in (plain, ckpt):
        loss = lm_loss(model, X, Y)
        loss.backward()
        losses.append(loss.detach())
    assert torch.equal(losses[0], losses[1])
    for p, q in zip(plain.parameters(), ckpt.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=1e-7)


def test_a_few_adam_steps_lower_the_loss_deterministically():
    text = dx.transformer.CharText(TEXT)

    def train():
        torch.manual_seed(0)
        model = dx.TinyGPT(len(text.vocab), 16, 32, 4, 2)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        g, losses = torch.Generator().manual_seed(0), []
        for _ in range(30):
            loss = lm_loss(model, *text.batch(8, 16, g))
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses
    first, second = train(), train()
    assert first == second
    assert first[-1] < 0.8 * first[0]


def test_bad_model_input_is_refused():
    with pytest.raises(ValueError, match="multiple of n_heads"):
        dx.TinyGPT(11, 16, 30, 4, 2)
    model = small_model()
    with pytest.raises(ValueError, match="T <= 16"):
        model(torch.zeros(2, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="integer ids"):
        model(torch.zeros(2, 4))


# --- the sizes

@pytest.mark.parametrize("prof", ["ci", "class", "full"])
@pytest.mark.parametrize("budget", [4 * GB, 16 * GB, 80 * GB], ids=["4GB", "16GB", "80GB"])
def test_gpu_sizes_fit_with_the_larger_batch(monkeypatch, prof, budget):
    monkeypatch.setenv("D2L_PROFILE", prof)
    s = dx.TinyGPT.sizes("cuda", budget=budget)
    assert set(s) == {"d_model", "n_heads", "n_layers", "seq_len", "batch", "steps"}
    assert s["d_model"] % s["n_heads"] == 0 and s["batch"] >= 4
    need = training_bytes(s["d_model"], s["n_heads"], s["n_layers"], s["seq_len"],
                          GROWTH * s["batch"])
    assert need <= 0.6 * budget


def test_sizes_grow_with_the_profile_and_memory(monkeypatch):
    params = {}
    for prof in ("ci", "class", "full"):
        monkeypatch.setenv("D2L_PROFILE", prof)
        s = dx.TinyGPT.sizes("cuda", budget=80 * GB)
        params[prof] = s["n_layers"] * s["d_model"] ** 2
        assert s["steps"] > 0
    assert params["ci"] < params["class"] < params["full"]
    small = dx.TinyGPT.sizes("cuda", budget=4 * GB)  # profile full
    assert small["n_layers"] * small["d_model"] ** 2 < params["full"]


def test_cpu_sizes_are_tiny_and_fixed(monkeypatch):
    for prof in ("ci", "class"):
        monkeypatch.setenv("D2L_PROFILE", prof)
        s = dx.TinyGPT.sizes("cpu")
        assert s["n_layers"] <= 2 and s["d_model"] <= 128 and s["seq_len"] <= 64


def test_a_model_too_large_for_the_memory_is_refused(monkeypatch):
    monkeypatch.setenv("D2L_PROFILE", "class")
    with pytest.raises(ValueError, match="does not fit"):
        dx.TinyGPT.sizes("cuda", budget=10 ** 6)
