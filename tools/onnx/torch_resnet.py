#!/usr/bin/python3
"""ResNets in PyTorch, exported to ONNX for `lpsgd train --model resnet.onnx`.

Two networks, for 1x28x28 input (Fashion-MNIST's shape) and 10 classes:

  resnet20  the CIFAR ResNet-20 of He et al. 2016 written out here, laid out
            as lpsgd's cnn:resnet20: a 3x3 convolution of 16 channels (no
            bias) with batch norm and ReLU, three stages of three basic
            blocks at 16, 32 and 64 channels (the first block of stages 2 and
            3 with stride 2 and a 1x1 convolution + batch norm projection as
            its shortcut), global average pooling and a linear layer. Read
            with its batch norms, it is cnn:resnet20's layer list exactly.
  resnet18  torchvision.models.resnet18(num_classes=10) with one change: its
            first convolution takes 1 input channel instead of 3. The rest is
            torchvision's, its 7x7 stride-2 stem and 3x3 max pool included
            (28x28 -> 7x7 before the first stage; lpsgd's own cnn:resnet18
            uses a 3x3 stem without max pool on images this small).

and three ways torch.onnx.export writes them (--form):

  training  TrainingMode.TRAINING, the model in train(): batch norms in
            training mode (at opset 13 with their statistics as extra,
            unused outputs; training_mode=1 from opset 14). lpsgd reads them
            as batch norms.
  preserve  TrainingMode.PRESERVE, the model in eval(): batch norms in
            inference form. lpsgd reads them as batch norms.
  folded    TrainingMode.EVAL (torch.onnx.export's default), the model in
            eval(): PyTorch folds every batch norm into the convolution
            before it. lpsgd reads convolutions with a bias, trains them
            without batch normalization, and logs a line saying so.

  /usr/bin/python3 tools/onnx/torch_resnet.py OUT.onnx [--model resnet20|resnet18]
      [--form training|preserve|folded] [--opset 13] [--seed 0] [--random-stats]

--random-stats gives the batch norms running statistics and affine
parameters other than PyTorch's initial ones (zeros and ones), so that the
forms differ and a comparison of outputs means something (tests/e2e/
onnx_resnet.py). Debian's python3-torch and python3-torchvision run with
/usr/bin/python3. Other programs use build() and export() as a module.
"""
import argparse
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

FORMS = ("training", "preserve", "folded")
MODELS = ("resnet20", "resnet18")


def conv_bn(cin, cout, k, stride):
    # No bias: the batch norm after the convolution shifts.
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm; the input added back before the
    last ReLU, through a 1x1 projection where the stride or width changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a = conv_bn(cin, cout, 3, stride)
        self.b = conv_bn(cout, cout, 3, 1)
        self.shortcut = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        # The main path first, then the shortcut: the order lpsgd's cnn:resnet20 lists them.
        out = self.b(F.relu(self.a(x)))
        sc = x if self.shortcut is None else self.shortcut(x)
        return F.relu(out + sc)


class ResNet20(nn.Module):
    def __init__(self, channels=1, classes=10, n=3):
        super().__init__()
        self.stem = conv_bn(channels, 16, 3, 1)
        blocks, cin = [], 16
        for s, width in enumerate((16, 32, 64)):
            for b in range(n):
                blocks.append(BasicBlock(cin, width, 2 if s > 0 and b == 0 else 1))
                cin = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.stem(x)))
        x = F.adaptive_avg_pool2d(x, 1)  # exported as GlobalAveragePool
        return self.fc(torch.flatten(x, 1))


def build(name, classes=10, seed=0):
    """The network `name` (resnet20 or resnet18) for [N, 1, 28, 28] input."""
    torch.manual_seed(seed)
    if name == "resnet20":
        return ResNet20(1, classes)
    if name == "resnet18":
        import torchvision
        model = torchvision.models.resnet18(num_classes=classes)
        model.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
        return model
    raise ValueError(f"unknown model {name!r} (resnet20 or resnet18)")


def random_stats(model, seed=0):
    """Running statistics from a few batches in train() (momentum 0.1, as
    trained), and affine parameters drawn around PyTorch's 1 and 0."""
    g = torch.Generator().manual_seed(seed + 1)
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(16, 1, 28, 28, generator=g) * 0.5 + 0.25)
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
    return model


def export(model, path, form, opset=13):
    """Writes `model` to `path` in `form` (training, preserve or folded);
    leaves the model in eval()."""
    from torch.onnx import TrainingMode
    if form not in FORMS:
        raise ValueError(f"unknown form {form!r} ({', '.join(FORMS)})")
    model.train(form == "training")
    mode = {"training": TrainingMode.TRAINING, "preserve": TrainingMode.PRESERVE,
            "folded": TrainingMode.EVAL}[form]
    with warnings.catch_warnings():
        # A batch norm's num_batches_tracked counter is not exported in
        # training mode (PyTorch says the graph's semantics change); it only
        # matters with momentum=None, which these models do not use.
        warnings.filterwarnings("ignore", message=".*num_batches_tracked.*")
        # A batch of 2: a batch norm in training mode needs two values per channel
        # (ResNet-18's last stage is 1x1 on 28x28 input).
        torch.onnx.export(model, torch.zeros(2, 1, 28, 28), path, opset_version=opset, training=mode,
                          do_constant_folding=form == "folded",
                          input_names=["image"], output_names=["logits"],
                          dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    model.eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the ONNX file to write")
    ap.add_argument("--model", choices=MODELS, default="resnet20")
    ap.add_argument("--form", choices=FORMS, default="preserve",
                    help="how the batch norms are exported (see the top of this file)")
    ap.add_argument("--opset", type=int, default=13, help="ONNX opset (lpsgd reads 11 to 17)")
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed for the initial weights")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--random-stats", action="store_true",
                    help="batch norm statistics and affine parameters other than the initial ones")
    a = ap.parse_args()
    model = build(a.model, a.classes, a.seed)
    if a.random_stats:
        random_stats(model, a.seed)
    export(model, a.out, a.form, a.opset)
    print(f"wrote {a.out}: {a.model}, {sum(p.numel() for p in model.parameters())} parameters, "
          f"opset {a.opset}, form {a.form}")


if __name__ == "__main__":
    main()
