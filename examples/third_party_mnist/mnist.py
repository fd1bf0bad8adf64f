#!/usr/bin/env python3
"""Train a small CNN on MNIST-shaped data with differential privacy (Opacus).

A third-party training script as users have them, of the shape of Opacus's own MNIST example:
argparse options, a small convolutional net, ``PrivacyEngine.make_private``, a ``train`` and
a ``test`` function with their own signatures, a ``main()`` run under ``__main__``. It holds no
line of the audit: ``audit run-script mnist.py -- <options>`` audits it as it is
(examples/third_party_mnist/README.md). The data are random MNIST-shaped tensors made here
(each class a fixed blurred pattern plus noise), so it runs offline in seconds.
"""

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from opacus import PrivacyEngine
from torch.utils.data import DataLoader, TensorDataset


def mnist_like(n, seed):
    """n images 1x28x28 in 10 classes: each class a fixed random pattern, plus noise."""
    g = torch.Generator().manual_seed(seed)
    patterns = F.avg_pool2d(torch.randn(10, 1, 28, 28, generator=torch.Generator().manual_seed(0)),
                            5, 1, 2)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = patterns[labels] * 3 + torch.randn(n, 1, 28, 28, generator=g)
    return TensorDataset(images, labels)


class SmallConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 8, 2, padding=3)  # -> [B, 8, 14, 14]
        self.conv2 = nn.Conv2d(8, 16, 4, 2)  # -> [B, 16, 6, 6] after pooling
        self.fc1 = nn.Linear(16 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 1)  # -> [B, 8, 13, 13]
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 1)  # -> [B, 16, 4, 4]
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def train(args, model, device, train_loader, optimizer, privacy_engine, epoch):
    model.train()
    criterion = nn.CrossEntropyLoss()
    losses = []
    for data, target in train_loader:
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = criterion(model(data), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    if privacy_engine is not None:
        epsilon = privacy_engine.get_epsilon(args.delta)
        print(f"Train Epoch: {epoch} \tLoss: {np.mean(losses):.4f} (eps = {epsilon:.2f}, "
              f"delta = {args.delta})")
    else:
        print(f"Train Epoch: {epoch} \tLoss: {np.mean(losses):.4f}")


def test(model, device, test_loader):
    model.eval()
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data.to(device))
            correct += (output.argmax(dim=1) == target.to(device)).sum().item()
    accuracy = correct / len(test_loader.dataset)
    print(f"Test set: Accuracy: {correct}/{len(test_loader.dataset)} ({100 * accuracy:.1f}%)")
    return accuracy


def main():
    parser = argparse.ArgumentParser(description="MNIST-shaped DP-SGD example")
    parser.add_argument("-b", "--batch-size", type=int, default=64)
    parser.add_argument("-n", "--epochs", type=int, default=2)
    parser.add_argument("--n-train", type=int, default=2000, help="training images")
    parser.add_argument("--n-test", type=int, default=500)
    parser.add_argument("-r", "--n-runs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--sigma", type=float, default=1.0, help="noise multiplier")
    parser.add_argument("-c", "--max-per-sample-grad-norm", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--disable-dp", action="store_true")
    parser.add_argument("--secure-rng", action="store_true")
    args = parser.parse_args()
    device = torch.device(args.device)

    train_loader = DataLoader(mnist_like(args.n_train, seed=1), batch_size=args.batch_size)
    test_loader = DataLoader(mnist_like(args.n_test, seed=2), batch_size=256)
    results = []
    for _ in range(args.n_runs):
        model = SmallConvNet().to(device)
        optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=0)
        privacy_engine = None
        if not args.disable_dp:
            privacy_engine = PrivacyEngine(secure_mode=args.secure_rng)
            model, optimizer, train_loader = privacy_engine.make_private(
                module=model,
                optimizer=optimizer,
                data_loader=train_loader,
                noise_multiplier=args.sigma,
                max_grad_norm=args.max_per_sample_grad_norm,
            )
        for epoch in range(1, args.epochs + 1):
            train(args, model, device, train_loader, optimizer, privacy_engine, epoch)
        results.append(test(model, device, test_loader))
    if len(results) > 1:
        print(f"Accuracy over {len(results)} runs: {100 * np.mean(results):.1f}%")


if __name__ == "__main__":
    main()
