"""The Loader as a `torch.utils.data.IterableDataset` (torch imported only here, when asked for)."""

from __future__ import annotations


def torch_dataset(loader):
    """An IterableDataset over `loader`'s batches, for `DataLoader(ds, batch_size=None)`. It keeps
    torchdata's StatefulDataLoader protocol (state_dict / load_state_dict go to the loader).
    The loader reads with its own threads: use the DataLoader's num_workers=0 (worker processes
    would each read the whole split)."""
    from torch.utils.data import IterableDataset, get_worker_info

    class LoaderDataset(IterableDataset):
        def __init__(self, loader):
            self.loader = loader

        def __iter__(self):
            info = get_worker_info()
            if info is not None and info.num_workers > 1:
                raise RuntimeError("gpuetl.Loader reads with its own threads (num_workers=, prefetch=): give the "
                                   "torch DataLoader num_workers=0")
            return iter(self.loader)

        def __len__(self):
            return len(self.loader)

        def state_dict(self):
            return self.loader.state_dict()

        def load_state_dict(self, state):
            self.loader.load_state_dict(state)

    return LoaderDataset(loader)
