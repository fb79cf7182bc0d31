"""A plain PyTorch loop over a DataLoader whose collate function sleeps about ten times what its
dataset's ``__getitem__`` sleeps for a batch: the collate is the input's cost, known beforehand.

argv: [--workers N] [--iterable]: the loader's num_workers (0 by default), an IterableDataset."""

import sys
import time

import torch

BATCH, BATCHES, EPOCHS = 4, 30, 2
SAMPLE_SLEEP = 0.001  # a sample's cost in the dataset
COLLATE_SLEEP = 10 * BATCH * SAMPLE_SLEEP  # the collate's, per batch: ten times the samples'
workers = int(sys.argv[sys.argv.index("--workers") + 1]) if "--workers" in sys.argv else 0


class SlowSamples(torch.utils.data.Dataset):
    def __len__(self):
        return BATCH * BATCHES

    def __getitem__(self, index):
        time.sleep(SAMPLE_SLEEP)
        return torch.full((4,), float(index % 7))


class SlowStream(torch.utils.data.IterableDataset):
    def __iter__(self):
        for index in range(BATCH * BATCHES):
            time.sleep(SAMPLE_SLEEP)
            yield torch.full((4,), float(index % 7))


def slow_collate(samples):
    time.sleep(COLLATE_SLEEP)
    return torch.stack(samples)


dataset = SlowStream() if "--iterable" in sys.argv else SlowSamples()
loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, collate_fn=slow_collate, num_workers=workers)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(EPOCHS):
    for batch in loader:
        optimizer.zero_grad()
        model(batch).pow(2).mean().backward()
        optimizer.step()
