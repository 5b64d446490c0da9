/**
 * The 16 convolution layers of GLP4NN's Table 5 (Fu et al., ICPP 2018; ../shared/papers/DIGEST.md): batch N, input
 * channels C, input side H = W, filters F, filter side K, stride S, padding P. The Siamese net's conv1/conv1_p and
 * conv2/conv2_p are the same layers twice (the two branches share weights): one entry each.
 */
import type { ConvLayerShape } from "../../conv/index.js";

export interface Table5Layer extends ConvLayerShape {
  readonly net: "CIFAR10" | "Siamese" | "CaffeNet" | "GoogLeNet";
}

const L = (
  net: Table5Layer["net"],
  layer: string,
  n: number,
  c: number,
  hw: number,
  f: number,
  k: number,
  s: number,
  p: number,
): Table5Layer => ({
  net,
  name: `${net} ${layer}`,
  n,
  c,
  hw,
  f,
  k,
  s,
  p,
});

export const TABLE5: readonly Table5Layer[] = [
  L("CIFAR10", "conv1", 100, 3, 32, 32, 5, 1, 2),
  L("CIFAR10", "conv2", 100, 32, 16, 32, 5, 1, 2),
  L("CIFAR10", "conv3", 100, 32, 8, 64, 5, 1, 2),
  L("Siamese", "conv1", 64, 1, 28, 20, 5, 1, 0),
  L("Siamese", "conv2", 64, 20, 12, 50, 5, 1, 0),
  L("CaffeNet", "conv1", 256, 3, 227, 96, 11, 4, 0),
  L("CaffeNet", "conv2", 256, 96, 27, 256, 5, 1, 2),
  L("CaffeNet", "conv3", 256, 256, 13, 384, 3, 1, 1),
  L("CaffeNet", "conv4", 256, 384, 13, 384, 3, 1, 1),
  L("CaffeNet", "conv5", 256, 384, 13, 256, 3, 1, 1),
  L("GoogLeNet", "conv_1", 32, 160, 7, 320, 3, 1, 1),
  L("GoogLeNet", "conv_2", 32, 832, 7, 32, 1, 1, 0),
  L("GoogLeNet", "conv_3", 32, 832, 7, 384, 1, 1, 0),
  L("GoogLeNet", "conv_4", 32, 192, 7, 384, 3, 1, 1),
  L("GoogLeNet", "conv_5", 32, 832, 7, 192, 1, 1, 0),
  L("GoogLeNet", "conv_6", 32, 832, 7, 48, 1, 1, 0),
];

/** A name as `--layers` compares it: case, spaces and punctuation ignored (`CaffeNet conv1` = `caffenet-conv1`). */
export const layerKey = (name: string): string => name.toLowerCase().replace(/[^a-z0-9]/g, "");

/** The layers named (a net's name: all its layers), in Table 5's order; all of them without names. */
export function selectLayers(names: readonly string[] | undefined): Table5Layer[] {
  if (names === undefined || names.length === 0) return [...TABLE5];
  const keys = new Set(names.map(layerKey));
  return TABLE5.filter((l) => keys.has(layerKey(l.name)) || keys.has(layerKey(l.net)));
}

/** Every name `--layers` takes: the nets, then the layers (written with a dash: `CaffeNet-conv1`). */
export const LAYER_CHOICES: readonly string[] = [
  ...new Set(TABLE5.map((l) => l.net)),
  ...TABLE5.map((l) => l.name.replace(" ", "-")),
];
