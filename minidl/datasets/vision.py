"""MNIST, Fashion-MNIST and CIFAR-10, as PyTorch's ``torchvision.datasets`` offer them.

``MNIST(root, train=True, download=True)`` keeps its files under ``root`` (``root/MNIST/raw``,
``root/FashionMNIST/raw``, ``root/cifar-10-binary.tar.gz``), downloads them once from the
usual public mirrors, and uses them only when their SHA-256 is the published one (see
:mod:`minidl.datasets.download`). CIFAR-10 is read from its *binary* archive, whose batches
are plain bytes, never from the Python one, whose batches are pickles (code, from a file).

Each is a map data set (:class:`minidl.data.Dataset`): ``ds[i]`` is ``(image, label)``, the
image a float32 Tensor (C, H, W) scaled to [0, 1] -- what torchvision gives after
``ToTensor()`` -- or whatever ``transform`` makes of it. Without transforms a loader gathers
whole batches at once (``get_batch``), and ``fit`` can take the data set itself.
``data`` (uint8) and ``targets`` (int64) hold everything, as in torchvision.
"""

from __future__ import annotations

import os
import tarfile

import numpy as np

from ..autograd.tensor import Tensor
from ..data.map_dataset import Dataset
from .download import DatasetFileError, fetch
from .formats import read_cifar_batch, read_idx


class _ImageDataset(Dataset):
    """What the three share: the arrays, the transforms and the sample/batch access."""

    classes: list[str] = []

    def __init__(self, root, train: bool, transform, target_transform, download: bool):
        self.root = os.path.expanduser(os.fspath(root))
        self.train = bool(train)
        self.transform, self.target_transform = transform, target_transform
        try:
            images, labels = self._load(bool(download))
        except ValueError as error:  # a file with the right hash but a wrong layout
            raise DatasetFileError(f"{type(self).__name__}: {error}") from None
        if len(images) != len(labels):
            raise DatasetFileError(f"{type(self).__name__}: {len(images)} images but "
                                   f"{len(labels)} labels")
        self.data, self.targets = images, labels.astype(np.int64)

    def _load(self, download: bool):
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.data)

    def _image(self, index):
        """Images as float32 in [0, 1] with a channel axis: (C, H, W), or (B, C, H, W)."""
        images = self.data[index].astype(np.float32) / np.float32(255)
        single = np.ndim(index) == 0
        if images.ndim == (2 if single else 3):  # grayscale: add the channel axis
            images = images[None] if single else images[:, None]
        return images

    def __getitem__(self, index):
        """``(image Tensor, label)`` for an int; ``(images, labels)`` arrays for an index array
        (what ``fit`` and ``DataReader`` ask for)."""
        if np.ndim(index) == 0:
            index = int(index)
            image, label = Tensor(self._image(index)), int(self.targets[index])
            if self.transform is not None:
                image = self.transform(image)
            if self.target_transform is not None:
                label = self.target_transform(label)
            return image, label
        if self.transform is None and self.target_transform is None:
            return self._columns(np.asarray(index))
        samples = [self[int(i)] for i in np.asarray(index)]
        return (np.stack([np.asarray(s[0].numpy() if isinstance(s[0], Tensor) else s[0])
                          for s in samples]), np.asarray([s[1] for s in samples]))

    def _columns(self, indices: np.ndarray) -> tuple:
        return self._image(indices), self.targets[indices]

    @property
    def get_batch(self):
        """Whole-batch gathering for a loader, when no transform runs per sample (else None)."""
        if self.transform is None and self.target_transform is None:
            return self._columns
        return None

    def __repr__(self) -> str:
        split = "train" if self.train else "test"
        return f"{type(self).__name__}(root={self.root!r}, split={split}, {len(self)} images)"


class MNIST(_ImageDataset):
    """The MNIST handwritten digits: 60,000 training and 10,000 test images, 1 × 28 × 28."""

    mirrors = ("https://ossci-datasets.s3.amazonaws.com/mnist/",
               "https://storage.googleapis.com/cvdf-datasets/mnist/")
    # (file, SHA-256) of the training and of the test images and labels.
    resources = {
        "train": (("train-images-idx3-ubyte.gz",
                   "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"),
                  ("train-labels-idx1-ubyte.gz",
                   "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c")),
        "test": (("t10k-images-idx3-ubyte.gz",
                  "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"),
                 ("t10k-labels-idx1-ubyte.gz",
                  "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6")),
    }
    classes = [f"{digit} - {name}" for digit, name in enumerate(
        ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"])]

    def __init__(self, root, train: bool = True, transform=None, target_transform=None,
                 download: bool = False):
        super().__init__(root, train, transform, target_transform, download)

    @property
    def raw_folder(self) -> str:
        """Where the downloaded files live: ``root/<class name>/raw``, as torchvision."""
        return os.path.join(self.root, type(self).__name__, "raw")

    def _load(self, download):
        if download:  # both splits at once, as torchvision: the next split is then offline
            for filename, sha256 in (*self.resources["train"], *self.resources["test"]):
                fetch(self.raw_folder, filename, sha256, self.mirrors, download)
        (images_file, images_sha), (labels_file, labels_sha) = \
            self.resources["train" if self.train else "test"]
        arrays = []
        for filename, sha256, ndim in ((images_file, images_sha, 3), (labels_file, labels_sha, 1)):
            path = fetch(self.raw_folder, filename, sha256, self.mirrors, download)
            with open(path, "rb") as file:
                arrays.append(read_idx(file.read(), path, ndim))
        return arrays


class FashionMNIST(MNIST):
    """Zalando's Fashion-MNIST: MNIST's format and sizes, ten kinds of clothing."""

    mirrors = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)
    resources = {
        "train": (("train-images-idx3-ubyte.gz",
                   "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84"),
                  ("train-labels-idx1-ubyte.gz",
                   "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845")),
        "test": (("t10k-images-idx3-ubyte.gz",
                  "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073"),
                 ("t10k-labels-idx1-ubyte.gz",
                  "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5")),
    }
    classes = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
               "Sneaker", "Bag", "Ankle boot"]


class CIFAR10(_ImageDataset):
    """CIFAR-10: 50,000 training and 10,000 test colour images, 3 × 32 × 32, ten classes."""

    mirrors = ("https://www.cs.toronto.edu/~kriz/",)
    archive = ("cifar-10-binary.tar.gz",
               "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd")
    folder = "cifar-10-batches-bin"
    train_batches = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
    test_batches = ("test_batch.bin",)
    classes = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
               "truck"]

    def __init__(self, root, train: bool = True, transform=None, target_transform=None,
                 download: bool = False):
        super().__init__(root, train, transform, target_transform, download)

    def _load(self, download):
        filename, sha256 = self.archive
        path = fetch(self.root, filename, sha256, self.mirrors, download)
        images, labels = [], []
        # Only the named regular files are read, straight from the verified archive: nothing
        # is extracted, so no member name can write anywhere.
        with tarfile.open(path, "r:gz") as archive:
            for batch in self.train_batches if self.train else self.test_batches:
                name = f"{self.folder}/{batch}"
                try:
                    member = archive.getmember(name)
                except KeyError:
                    raise DatasetFileError(f"{path} has no {name}") from None
                if not member.isfile():
                    raise DatasetFileError(f"{path}: {name} is not a regular file")
                batch_images, batch_labels = read_cifar_batch(
                    archive.extractfile(member).read(), f"{path}:{name}")
                images.append(batch_images)
                labels.append(batch_labels)
        return np.concatenate(images), np.concatenate(labels)
