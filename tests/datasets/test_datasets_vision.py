"""MNIST, FashionMNIST and CIFAR10 on small fixture files written in the real formats (IDX,
CIFAR-10 binary batches in their tar.gz): loading, SHA-256 checks, downloads from a local
mirror, clear refusals when offline or damaged, and use in DataLoader and fit. Nothing here
touches the network."""

from __future__ import annotations

import gzip
import hashlib
import io
import struct
import tarfile

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim
from minidl.data import DataLoader
from minidl.datasets import CIFAR10, MNIST, DatasetFileError, FashionMNIST

rng = np.random.default_rng(0)


def idx_bytes(array: np.ndarray) -> bytes:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes())


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def idx_fixture(count):
    images = rng.integers(0, 256, (count, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, count, dtype=np.uint8)
    return images, labels, idx_bytes(images), idx_bytes(labels)


def mnist_class(base, mirror, files):
    """``base`` with its published hashes replaced by the fixture files' and a local mirror."""
    resources = {split: tuple((name, sha(files[name])) for name, _ in pairs)
                 for split, pairs in base.resources.items()}
    return type(base.__name__, (base,), {"resources": resources, "mirrors": (mirror,)})


@pytest.fixture
def mnist_files(tmp_path):
    """A local mirror holding train (12 images) and test (5 images) files."""
    train_images, train_labels, train_x, train_y = idx_fixture(12)
    test_images, test_labels, test_x, test_y = idx_fixture(5)
    files = {"train-images-idx3-ubyte.gz": train_x, "train-labels-idx1-ubyte.gz": train_y,
             "t10k-images-idx3-ubyte.gz": test_x, "t10k-labels-idx1-ubyte.gz": test_y}
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name, data in files.items():
        (mirror / name).write_bytes(data)
    arrays = {"train": (train_images, train_labels), "test": (test_images, test_labels)}
    return mirror.as_uri(), files, arrays


@pytest.mark.parametrize("base", [MNIST, FashionMNIST])
def test_a_download_from_a_mirror_is_checked_and_loaded_as_torchvision_lays_it_out(
        base, mnist_files, tmp_path):
    mirror, files, arrays = mnist_files
    dataset_class = mnist_class(base, mirror, files)
    root = tmp_path / "data"
    train = dataset_class(root, train=True, download=True)
    assert (root / base.__name__ / "raw" / "train-images-idx3-ubyte.gz").exists()
    images, labels = arrays["train"]
    assert len(train) == 12 and train.data.dtype == np.uint8
    image, label = train[3]
    assert isinstance(image, md.Tensor) and image.shape == (1, 28, 28)
    np.testing.assert_allclose(image.numpy()[0], images[3] / 255, rtol=1e-6)
    assert label == int(labels[3])
    test = dataset_class(root, train=False)  # now offline: the files are there
    assert len(test) == 5 and test.targets.tolist() == arrays["test"][1].tolist()
    batch_images, batch_labels = train[np.array([0, 5])]
    assert batch_images.shape == (2, 1, 28, 28) and batch_labels.tolist() == [labels[0],
                                                                              labels[5]]


def test_offline_missing_and_damaged_files_are_refused_with_the_reason(mnist_files, tmp_path):
    mirror, files, _ = mnist_files
    offline = mnist_class(MNIST, (tmp_path / "nowhere").as_uri(), files)
    with pytest.raises(DatasetFileError, match="does not exist; pass download=True"):
        offline(tmp_path / "data")
    with pytest.raises(DatasetFileError, match="could not download train-images.*offline"):
        offline(tmp_path / "data", download=True)
    assert not list((tmp_path / "data").rglob("*.gz"))  # nothing half-written is left
    good = mnist_class(MNIST, mirror, files)
    good(tmp_path / "data", download=True)
    path = tmp_path / "data" / "MNIST" / "raw" / "train-labels-idx1-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-3])  # a truncated file
    with pytest.raises(DatasetFileError, match="damaged.*SHA-256"):
        good(tmp_path / "data")
    assert len(good(tmp_path / "data", download=True)) == 12  # fetched again, intact
    tampered = dict(files, **{"train-labels-idx1-ubyte.gz": idx_bytes(np.zeros(3))})
    wrong_mirror = mnist_class(MNIST, mirror, tampered)
    path.unlink()
    with pytest.raises(DatasetFileError, match="SHA-256 is .* expected"):
        wrong_mirror(tmp_path / "data", download=True)


def test_a_file_with_the_right_hash_but_a_wrong_layout_is_refused_by_name(tmp_path):
    images = idx_bytes(np.zeros((4, 28, 28)))
    cut = gzip.compress(gzip.decompress(images)[:-10])
    labels = idx_bytes(np.zeros(4))
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    files = {"train-images-idx3-ubyte.gz": cut, "train-labels-idx1-ubyte.gz": labels,
             "t10k-images-idx3-ubyte.gz": images, "t10k-labels-idx1-ubyte.gz": labels}
    for name, data in files.items():
        (mirror / name).write_bytes(data)
    dataset_class = mnist_class(MNIST, mirror.as_uri(), files)
    with pytest.raises(DatasetFileError, match="train-images-idx3-ubyte.gz: the header "
                                               "describes"):
        dataset_class(tmp_path / "data", download=True)


def cifar_archive(tmp_path, batches, extra=None):
    """A cifar-10-binary.tar.gz with ``batches`` {name: (images, labels)}; ``extra`` adds
    raw tar members."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, (images, labels) in batches.items():
            records = np.concatenate([labels[:, None].astype(np.uint8),
                                      images.reshape(len(images), -1)], axis=1).tobytes()
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(records)
            archive.addfile(info, io.BytesIO(records))
        for info in extra or ():
            archive.addfile(info)
    data = buffer.getvalue()
    mirror = tmp_path / "cifar-mirror"
    mirror.mkdir(exist_ok=True)
    (mirror / "cifar-10-binary.tar.gz").write_bytes(data)
    return type("CIFAR10", (CIFAR10,), {"archive": ("cifar-10-binary.tar.gz", sha(data)),
                                        "mirrors": (mirror.as_uri(),)})


def cifar_batches(per_batch=3):
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    return {name: (rng.integers(0, 256, (per_batch, 3, 32, 32), dtype=np.uint8),
                   rng.integers(0, 10, per_batch)) for name in names}


def test_cifar10_reads_the_binary_batches_from_the_checked_archive(tmp_path):
    batches = cifar_batches()
    dataset_class = cifar_archive(tmp_path, batches)
    train = dataset_class(tmp_path / "data", download=True)
    test = dataset_class(tmp_path / "data", train=False)
    assert len(train) == 15 and len(test) == 3
    image, label = train[4]  # the second image of data_batch_2
    expected_images, expected_labels = batches["data_batch_2.bin"]
    assert image.shape == (3, 32, 32) and label == int(expected_labels[1])
    np.testing.assert_allclose(image.numpy(), expected_images[1] / 255, rtol=1e-6)
    assert test.targets.tolist() == batches["test_batch.bin"][1].tolist()
    assert train.classes[0] == "airplane"


def test_cifar10_refuses_an_archive_whose_batch_is_not_a_plain_file(tmp_path):
    batches = cifar_batches()
    del batches["test_batch.bin"]
    link = tarfile.TarInfo("cifar-10-batches-bin/test_batch.bin")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    dataset_class = cifar_archive(tmp_path, batches, extra=[link])
    with pytest.raises(DatasetFileError, match="test_batch.bin is not a regular file"):
        dataset_class(tmp_path / "data", train=False, download=True)


def test_the_data_sets_plug_into_dataloader_and_fit(mnist_files, tmp_path):
    mirror, files, arrays = mnist_files
    train = mnist_class(MNIST, mirror, files)(tmp_path / "data", download=True)
    loader = DataLoader(train, batch_size=5, shuffle=True, seed=1)
    images, labels = next(iter(loader))
    assert images.shape == (5, 1, 28, 28) and labels.dtype == np.int64
    transformed = mnist_class(MNIST, mirror, files)(tmp_path / "data",
                                                    transform=lambda x: x * 2.0,
                                                    target_transform=lambda y: y + 10)
    assert transformed.get_batch is None
    image, label = transformed[0]
    np.testing.assert_allclose(image.numpy()[0], arrays["train"][0][0] / 255 * 2, rtol=1e-6)
    assert label == arrays["train"][1][0] + 10
    md.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 10))
    history = md.fit(model, nn.CrossEntropyLoss(), optim.SGD(model.parameters(), lr=0.01),
                     train, batch_size=4, epochs=2, progress=False)
    assert len(history.history["loss"]) == 2
