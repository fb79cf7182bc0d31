"""A plain PyTorch training loop, no Keras: a linear model over a DataLoader whose collate function
turns each example's text into token ids in Python, in the training thread (PyTorch's text
classification tutorial in small). Synthetic data.

argv: OUT.json, where the job writes the steps it ran per epoch."""

import json
import sys

import torch

EPOCHS, BATCH, ROWS, VOCAB = 2, 16, 6400, 2000
generator = torch.Generator().manual_seed(0)
texts = [" ".join(f"w{int(i)}" for i in torch.randint(0, VOCAB, (120,), generator=generator)) for _ in range(ROWS)]
labels = torch.randint(0, 4, (ROWS,), generator=generator)


def collate_batch(batch):
    """Token ids and offsets for an EmbeddingBag, made word by word in Python: the loop's input cost."""
    ids, offsets, targets = [], [0], []
    for text, label in batch:
        tokens = [int(word[1:]) % VOCAB for word in text.lower().split()]
        ids.append(torch.tensor(tokens, dtype=torch.int64))
        offsets.append(len(tokens))
        targets.append(label)
    return torch.cat(ids), torch.tensor(offsets[:-1]).cumsum(dim=0), torch.stack(targets)


loader = torch.utils.data.DataLoader(list(zip(texts, labels)), batch_size=BATCH, shuffle=True, collate_fn=collate_batch)
model = torch.nn.Sequential()
embedding, classify = torch.nn.EmbeddingBag(VOCAB, 32), torch.nn.Linear(32, 4)
optimizer = torch.optim.SGD([*embedding.parameters(), *classify.parameters()], lr=0.5)
loss_fn = torch.nn.CrossEntropyLoss()
steps = []
for _ in range(EPOCHS):
    count = 0
    for ids, offsets, targets in loader:
        optimizer.zero_grad()
        loss_fn(classify(embedding(ids, offsets)), targets).backward()
        optimizer.step()
        count += 1
    steps.append(count)
with open(sys.argv[1], "w") as f:
    json.dump({"steps": steps}, f)
