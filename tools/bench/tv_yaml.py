#!/usr/bin/python3
"""dlrun model descriptions of torchvision models, written by walking the
module tree, with parameter keys equal to torchvision's state_dict keys:

  resnet18       BasicBlock: conv1 bn1 relu conv2 bn2 (+ downsample), add, relu
  mobilenet_v2   InvertedResidual: `residual` around its `conv` when it has
                 a skip connection
  efficientnet_b0  MBConv with SqueezeExcitation (mul by the gate) and
                 stochastic depth (identity at inference)
  densenet121    dense layers: concat of every earlier output, norm, relu, conv

Usage: /usr/bin/python3 tools/bench/tv_yaml.py NAME SIZE > NAME.yaml
(also imported by tools/bench/run: describe(name, module, size)).
"""

import sys

import torch.nn as nn
import torchvision
from torchvision.models import densenet, efficientnet, mobilenetv2, resnet
from torchvision.ops import misc

try:
    from torchvision.ops.stochastic_depth import StochasticDepth
except ImportError:  # pragma: no cover
    StochasticDepth = ()


def pair(v):
    return v[0] if isinstance(v, (tuple, list)) and v[0] == v[1] else list(v)


def leaf(m, name):
    """The entry of a module without children, or None if it has no op."""
    e = None
    if isinstance(m, nn.Conv2d):
        hp = {"out_channels": m.out_channels, "kernel_size": pair(m.kernel_size)}
        if pair(m.stride) != 1:
            hp["stride"] = pair(m.stride)
        if pair(m.padding) != 0:
            hp["padding"] = pair(m.padding)
        if m.groups != 1:
            hp["groups"] = m.groups
        if m.bias is None:
            hp["bias"] = False
        e = {"conv2d": hp}
    elif isinstance(m, nn.BatchNorm2d):
        e = {"batch_norm2d": {"eps": m.eps} if m.eps != 1e-5 else {}}
    elif isinstance(m, nn.ReLU):
        e = {"relu": {}}
    elif isinstance(m, nn.ReLU6):
        e = {"relu6": {}}
    elif isinstance(m, nn.SiLU):
        e = {"silu": {}}
    elif isinstance(m, nn.Sigmoid):
        e = {"sigmoid": {}}
    elif isinstance(m, nn.Dropout):
        e = {"dropout": {"p": m.p}}
    elif isinstance(m, nn.Linear):
        e = {"linear": {"out_features": m.out_features}}
    elif isinstance(m, nn.MaxPool2d):
        e = {"max_pool2d": {"kernel_size": m.kernel_size, "stride": m.stride,
                            "padding": m.padding}}
    elif isinstance(m, nn.AvgPool2d):
        e = {"avg_pool2d": {"kernel_size": m.kernel_size, "stride": m.stride}}
    elif isinstance(m, nn.AdaptiveAvgPool2d):
        e = {"adaptive_avg_pool2d": {"output_size": 1}}
    elif isinstance(m, nn.Identity) or isinstance(m, StochasticDepth):
        return None
    else:
        raise SystemExit("tv_yaml.py: no dlrun entry for %s" % type(m).__name__)
    return named(name, e)


def named(name, e):
    """e under scope `name`: dlrun names may not start with a digit, so a
    numbered child goes unnamed and takes its index in its list as its
    scope (the caller checks the index)."""
    if name is None or name[0].isdigit():
        return e
    return dict({"name": name}, **e)


def extend(body, cname, entries):
    if cname[0].isdigit():
        assert len(entries) == 1 and len(body) == int(cname), (cname, len(body))
    body.extend(entries)


def seq(m, name):
    """An nn.Sequential (or a subclass that runs its children in order)."""
    body = []
    for cname, c in m.named_children():
        extend(body, cname, walk(c, cname))
    return named(name, {"sequential": body})


def basic_block(m, name):
    # the block's input, named for the add (an identity costs a copy)
    inp = "block_in"
    body = [{"name": inp, "identity": {}}, leaf(m.conv1, "conv1"), leaf(m.bn1, "bn1"), {"relu": {}},
            leaf(m.conv2, "conv2"), leaf(m.bn2, "bn2")]
    if m.downsample is not None:
        d = seq(m.downsample, "downsample")
        d["in"] = inp
        body.append(d)
        body.append({"in": ["bn2", "downsample"], "add": {}})
    else:
        body.append({"in": ["bn2", inp], "add": {}})
    body.append({"relu": {}})
    return named(name, {"sequential": body})


def squeeze_excitation(m, name):
    # scale = sigmoid(fc2(silu(fc1(avgpool(x))))); y = scale * x
    inp = "se_in"
    body = [{"name": inp, "identity": {}}, {"name": "avgpool", "adaptive_avg_pool2d": {"output_size": 1}},
            leaf(m.fc1, "fc1"), leaf(m.activation, None), leaf(m.fc2, "fc2"),
            leaf(m.scale_activation, "scale"),
            {"in": ["scale", inp], "mul": {}}]
    return body


def walk(m, name, inp=None):
    """Entries for module m, scoped `name`; inp: the name of its input
    (for blocks that reach back to it)."""
    if isinstance(m, resnet.BasicBlock):
        return [basic_block(m, name)]
    if isinstance(m, mobilenetv2.InvertedResidual):
        inner = seq(m.conv, "conv")
        if m.use_res_connect:
            return [named(name, {"residual": [inner]})]
        return [named(name, {"sequential": [inner]})]
    if isinstance(m, efficientnet.MBConv):
        body = []
        for cname, c in m.block.named_children():
            if isinstance(c, misc.SqueezeExcitation):
                extend(body, cname, [named(cname, {"sequential": squeeze_excitation(c, cname)})])
            else:
                extend(body, cname, walk(c, cname))
        inner = {"name": "block", "sequential": body}
        if m.use_res_connect:
            return [named(name, {"residual": [inner]})]
        return [named(name, {"sequential": [inner]})]
    if isinstance(m, densenet._DenseBlock):
        out, prev = [], []
        for cname, c in m.named_children():
            ins = [inp] + prev
            src = {"in": ins, "concat": {"dim": 1}} if len(ins) > 1 else None
            body = [] if src is None else [src]
            if src is None:
                first = walk(c.norm1, "norm1")[0]
                first["in"] = inp
                body.append(first)
            else:
                body.extend(walk(c.norm1, "norm1"))
            for part in ("relu1", "conv1", "norm2", "relu2", "conv2"):
                body.extend(walk(getattr(c, part), part))
            out.append({"name": cname, "sequential": body})
            prev.append(cname)
        out.append({"name": name + "_out", "in": [inp] + prev, "concat": {"dim": 1}})
        # the block's scope holds the layers; its output is the concat
        return [{"name": name, "sequential": out}]
    if isinstance(m, nn.Sequential):
        return [seq(m, name)]
    e = leaf(m, name)
    return [] if e is None else [e]


def describe(arch, m, size):
    """The YAML text (as a dict) of torchvision model `arch` (module m)."""
    layers = []
    if arch.startswith("resnet"):
        for cname in ("conv1", "bn1", "relu", "maxpool"):
            layers.extend(walk(getattr(m, cname), cname))
        for ln in ("layer1", "layer2", "layer3", "layer4"):
            layers.extend(walk(getattr(m, ln), ln))
        layers.append({"adaptive_avg_pool2d": {"output_size": 1}})
        layers.append({"flatten": {}})
        layers.extend(walk(m.fc, "fc"))
    elif arch.startswith("densenet"):
        feats = []
        prev = None
        for cname, c in m.features.named_children():
            if isinstance(c, densenet._DenseBlock):
                feats.extend(walk(c, cname, prev))
                prev = cname
            else:
                feats.extend(walk(c, cname))
                prev = cname
        layers.append({"name": "features", "sequential": feats})
        layers += [{"relu": {}}, {"adaptive_avg_pool2d": {"output_size": 1}},
                   {"flatten": {}}]
        layers.extend(walk(m.classifier, "classifier"))
    else:  # mobilenet_v2, efficientnet
        layers.extend(walk(m.features, "features"))
        layers += [{"adaptive_avg_pool2d": {"output_size": 1}}, {"flatten": {}}]
        layers.extend(walk(m.classifier, "classifier"))
    return {"name": arch, "inputs": {"x": {"shape": [3, size, size]}},
            "layers": layers}


def main():
    import yaml
    arch, size = sys.argv[1], int(sys.argv[2])
    m = getattr(torchvision.models, arch)()
    print(yaml.safe_dump(describe(arch, m, size), sort_keys=False), end="")


if __name__ == "__main__":
    main()
