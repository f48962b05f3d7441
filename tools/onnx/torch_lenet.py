#!/usr/bin/python3
"""A LeNet in PyTorch, exported to ONNX for `lpsgd train --model lenet.onnx`.

The network is the one lpsgd calls cnn:lenet (conv5x5-32 pad 2, ReLU, max
pool 2, conv5x5-64 pad 2, ReLU, max pool 2, flatten, fc-512, ReLU, fc-10),
written as any PyTorch user would; its initializers are the parameters lpsgd
starts from. --init torch (the default) keeps PyTorch's own initialisation
(uniform, about 1/sqrt(3 fan_in) for weights and biases); --init he draws
what lpsgd draws for cnn:lenet (He normal, Xavier uniform for the last layer,
zero biases), other values from another generator: docs/onnx.md compares both.

  /usr/bin/python3 tools/onnx/torch_lenet.py lenet.onnx [--opset 13] [--seed 0] [--init he]

(Debian's python3-torch runs with /usr/bin/python3.)
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class LeNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * 7 * 7, 512)
        self.fc2 = nn.Linear(512, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the ONNX file to write")
    ap.add_argument("--opset", type=int, default=13, help="ONNX opset (lpsgd reads 11 to 17)")
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed for the initial weights")
    ap.add_argument("--init", choices=["torch", "he"], default="torch",
                    help="PyTorch's default initialisation, or lpsgd's scheme (He normal, Xavier last)")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    model = LeNet().eval()
    if a.init == "he":
        layers = [model.conv1, model.conv2, model.fc1, model.fc2]
        for layer in layers:
            if layer is layers[-1]:
                nn.init.xavier_uniform_(layer.weight)
            else:
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            nn.init.zeros_(layer.bias)
    torch.onnx.export(model, torch.zeros(1, 1, 28, 28), a.out, opset_version=a.opset,
                      input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    print(f"wrote {a.out}: LeNet, {sum(p.numel() for p in model.parameters())} parameters, "
          f"opset {a.opset}, {a.init} initialisation")


if __name__ == "__main__":
    main()
