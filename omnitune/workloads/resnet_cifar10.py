"""torchvision's ResNet-18 adapted to 32×32 images, on CIFAR-10 read from a local --data-dir.

Nothing is downloaded. Obtain the data once (the 'CIFAR-10 python version' archive,
cifar-10-python.tar.gz from the dataset's home page), unpack it so that
DATA_DIR/cifar-10-batches-py/ exists, then pass --data-dir DATA_DIR.
"""

import torchvision
from torch import nn

from omnitune.core.errors import UserError

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def build_model() -> nn.Module:
    model = torchvision.models.resnet18(num_classes=10)
    # 32×32 inputs: a 3×3 stride-1 stem and no max-pool, as is usual for CIFAR.
    model.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


def build_datasets(data_dir, seed):
    if not data_dir:
        raise UserError("resnet-cifar10 needs --data-dir DIR holding cifar-10-batches-py/ "
                        "(unpacked cifar-10-python.tar.gz; omnitune downloads nothing)")
    from torchvision import transforms as T

    norm = T.Compose([T.ToTensor(), T.Normalize(MEAN, STD)])
    augment = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), norm])
    try:
        train = torchvision.datasets.CIFAR10(data_dir, train=True, transform=augment, download=False)
        test = torchvision.datasets.CIFAR10(data_dir, train=False, transform=norm, download=False)
    except RuntimeError as e:
        raise UserError(f"--data-dir {data_dir}: CIFAR-10 not found ({e}); unpack "
                        "cifar-10-python.tar.gz there so that cifar-10-batches-py/ exists") from None
    return train, test
