"""Tiny random image models for the zoo: torchvision ResNet-18,
MobileNetV3-Small, EfficientNet-B0 and ConvNeXt-Tiny layouts, and timm's
ViT and MLP-Mixer.

Images are 3x32x32, batch 16, 10 classes. ResNet-18 and MobileNetV3-Small
are torchvision's own constructors (full width; small images keep them
cheap); EfficientNet-B0 and ConvNeXt-Tiny keep their block layouts at a
reduced width and depth (the ``efficientnet_b0``/``convnext_tiny``
constructors fix those), through the public ``EfficientNet``/``ConvNeXt``
classes. Stochastic depth and dropout are 0.
"""

from __future__ import annotations

import torch

from model_zoo.spec import ZooModel

__all__ = ["MODELS"]

BATCH, CLASSES = 16, 10


def _image() -> tuple[torch.Tensor, ...]:
    return (torch.randn(BATCH, 3, 32, 32),)


def _target(_: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return torch.randint(0, CLASSES, (BATCH,))


def _call(m: object, x: torch.Tensor) -> torch.Tensor:
    return m(x)  # type: ignore[operator,no-any-return]


def _resnet18() -> torch.nn.Module:
    import torchvision

    return torchvision.models.resnet18(num_classes=CLASSES)


MOBILENET_BLOCKS = (0, 1, 3, 4)
"""Which of MobileNetV3-Small's 11 inverted-residual blocks the zoo keeps:
one of each kind (squeeze-excite + ReLU at stride 2 without expansion,
expansion + ReLU at stride 2, squeeze-excite + hardswish 5x5 at stride 2,
and the same with a residual connection)."""


def _mobilenet_v3() -> torch.nn.Module:
    from torchvision.models.mobilenetv3 import MobileNetV3, _mobilenet_v3_conf

    blocks, last_channel = _mobilenet_v3_conf("mobilenet_v3_small")
    return MobileNetV3([blocks[i] for i in MOBILENET_BLOCKS], last_channel,
                       num_classes=CLASSES, dropout=0.0)


def _efficientnet_b0() -> torch.nn.Module:
    from functools import partial

    from torchvision.models.efficientnet import EfficientNet, MBConvConfig

    # EfficientNet-B0's seven stages (expand ratio, kernel, stride, in, out,
    # layers) at width 0.5 and depth 0.25 (one block per stage).
    conf = partial(MBConvConfig, width_mult=0.5, depth_mult=0.25)
    stages = [conf(1, 3, 1, 32, 16, 1), conf(6, 3, 2, 16, 24, 2), conf(6, 5, 2, 24, 40, 2),
              conf(6, 3, 2, 40, 80, 3), conf(6, 5, 1, 80, 112, 3), conf(6, 5, 2, 112, 192, 4),
              conf(6, 3, 1, 192, 320, 1)]
    return EfficientNet(stages, dropout=0.0, stochastic_depth_prob=0.0, num_classes=CLASSES)


def _convnext_tiny() -> torch.nn.Module:
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    # ConvNeXt-Tiny's four stages (96/192/384/768 wide, 3/3/9/3 deep) at
    # 1/6 width and depths 1/1/2/1.
    stages = [CNBlockConfig(16, 32, 1), CNBlockConfig(32, 64, 1), CNBlockConfig(64, 128, 2),
              CNBlockConfig(128, None, 1)]
    return ConvNeXt(stages, stochastic_depth_prob=0.0, num_classes=CLASSES)


def _timm_vit() -> torch.nn.Module:
    import timm

    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32,
                             patch_size=8, embed_dim=64, depth=2, num_heads=4,
                             num_classes=CLASSES)


def _timm_mixer() -> torch.nn.Module:
    from timm.models.mlp_mixer import MlpMixer

    model = MlpMixer(num_classes=CLASSES, img_size=32, patch_size=8, num_blocks=2, embed_dim=64)
    torch.nn.init.normal_(model.head.weight, std=0.1)  # timm starts the head at zero
    return model


def _model(name: str, library: str, config: str, build: object, heavy: tuple[str, ...] = (),
           lr_scale: float = 1.0, heavy_reason: str = "") -> ZooModel:
    return ZooModel(name=name, library=library, config=config, build=build,  # type: ignore[arg-type]
                    inputs=_image, target=_target, logits=_call, heavy=heavy, lr_scale=lr_scale,
                    heavy_reason=heavy_reason)


MODELS: list[ZooModel] = [
    _model("tv-resnet18", "torchvision", "resnet18(num_classes=10), 32x32 images", _resnet18,
           lr_scale=0.1),
    _model("tv-mobilenet_v3_small", "torchvision",
           "MobileNetV3 with 4 of Small's 11 blocks (one of each kind), num_classes=10; "
           "32x32 images", _mobilenet_v3, lr_scale=0.1),
    _model("tv-efficientnet_b0", "torchvision",
           "EfficientNet with B0's 7 stages at width 0.5, one block each; 32x32 images",
           _efficientnet_b0, lr_scale=0.1),
    _model("tv-convnext_tiny", "torchvision",
           "ConvNeXt with Tiny's 4 stages at widths 16/32/64/128, depths 1/1/2/1; 32x32 images",
           _convnext_tiny),
    _model("timm-vit", "timm",
           "vit_tiny_patch16_224 at img_size=32, patch_size=8, embed_dim=64, depth=2, "
           "num_heads=4", _timm_vit),
    _model("timm-mixer", "timm",
           "MlpMixer (mixer_s16_224's blocks) at img_size=32, patch_size=8, embed_dim=64, "
           "num_blocks=2",
           _timm_mixer),
]
