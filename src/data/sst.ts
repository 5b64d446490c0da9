/**
 * Reader of Stanford Sentiment Treebank files: one binarized tree per line in PTB s-expressions, a sentiment label
 * on every node, every word wrapped in a one-child preterminal: `(3 (2 (2 The) (2 Rock)) (4 ...))`.
 *
 * A hand-written scanner over the whole string (no regex, no per-line split, no recursion): the training split is
 * read on every run, and trees of any depth must not overflow the call stack.
 */

import { UserError } from "../util/errors.js";
import { cut, quote } from "../util/text.js";
import { readTextFile } from "./text-file.js";
import type { TreeNode } from "./tree.js";

/** A malformed tree file. `line` and `column` are 1-based; the column counts Unicode code points. */
export class TreeFormatError extends UserError {
  readonly file: string;
  readonly line: number;
  readonly column: number;

  constructor(file: string, line: number, column: number, detail: string) {
    super(`${file}:${line}:${column}: ${detail}`);
    this.name = "TreeFormatError";
    this.file = file;
    this.line = line;
    this.column = column;
  }
}

export interface ParseOptions {
  /** Labels must lie in 0..numLabels-1. Default 5 (SST fine-grained sentiment). */
  numLabels?: number;
}

export interface ReadOptions extends ParseOptions {
  /** Stop after this many trees (the rest of the file is not parsed, so errors there go unreported). */
  maxTrees?: number;
}

const DEFAULT_NUM_LABELS = 5;

const OPEN = 0x28; // (
const CLOSE = 0x29; // )
const SPACE = 0x20;
const TAB = 0x09;
const CR = 0x0d; // whitespace anywhere, so that Windows line endings need no special case
const DIGIT_0 = 0x30;
const DIGIT_9 = 0x39;

function isSpace(c: number): boolean {
  return c === SPACE || c === TAB || c === CR;
}

/** Parses every tree in `text`; `file` is only used in error messages. */
export function parseTrees(text: string, file = "<input>", opts?: ParseOptions): TreeNode[] {
  return parse(text, file, opts?.numLabels ?? DEFAULT_NUM_LABELS, Number.POSITIVE_INFINITY);
}

/** Reads a tree file (UTF-8). */
export function readTrees(path: string, opts?: ReadOptions): TreeNode[] {
  const maxTrees = opts?.maxTrees ?? Number.POSITIVE_INFINITY;
  if (!(maxTrees >= 1) || (maxTrees !== Number.POSITIVE_INFINITY && !Number.isInteger(maxTrees))) {
    throw new RangeError(`readTrees: option 'maxTrees' must be an integer >= 1; got ${maxTrees}`);
  }
  return parse(readTextFile(path, "tree file"), path, opts?.numLabels ?? DEFAULT_NUM_LABELS, maxTrees);
}

/** Fills an internal node's two child slots until the children are parsed; never in a returned tree. */
const PENDING: TreeNode = { label: -1, word: null, children: [] };

function parse(text: string, file: string, numLabels: number, maxTrees: number): TreeNode[] {
  if (!Number.isInteger(numLabels) || numLabels < 1) {
    throw new RangeError(`parseTrees: option 'numLabels' must be an integer >= 1; got ${numLabels}`);
  }
  const trees: TreeNode[] = [];
  const n = text.length;
  let pos = text.charCodeAt(0) === 0xfeff ? 1 : 0; // a byte-order mark is not part of the first tree
  let lineNo = 1;
  let lineStart = pos;
  // The open internal nodes, innermost last, as parallel stacks: reused across trees, empty between them. Plain
  // arrays of nodes and small integers rather than frame objects, because allocation (and the garbage collection it
  // causes) is most of the cost of reading a file.
  const open: TreeNode[] = [];
  const openAt: number[] = []; // where its '(' is, for "opened at" messages
  const filled: number[] = []; // how many of its two children are parsed

  // Only called on the error path, so computing the column in code points costs nothing in the common case.
  const columnOf = (at: number): number => codePoints(text, lineStart, at) + 1;
  const fail = (at: number, detail: string): never => {
    throw new TreeFormatError(file, lineNo, columnOf(at), detail);
  };
  const missingClose = (at: number, openPos: number): never =>
    fail(
      at,
      `unbalanced parentheses: expected ')' to close the node opened at column ${columnOf(openPos)}, found end of line`,
    );
  const describe = (at: number, lineEnd: number): string => {
    if (at >= lineEnd) return "end of line";
    const c = text.charCodeAt(at);
    if (c === OPEN || c === CLOSE) return `'${text[at]}'`;
    return quote(text.slice(at, tokenEnd(text, at, lineEnd)));
  };

  while (pos < n && trees.length < maxTrees) {
    const newline = text.indexOf("\n", pos);
    const nextLine = newline < 0 ? n : newline + 1;
    // A CR before the LF is not part of the line, so "end of line" columns match what an editor shows.
    let lineEnd = newline < 0 ? n : newline;
    if (lineEnd > pos && text.charCodeAt(lineEnd - 1) === CR) lineEnd--;
    pos = skipSpace(text, pos, lineEnd);

    if (pos < lineEnd) {
      const first = text.charCodeAt(pos);
      if (first === CLOSE) fail(pos, "unbalanced parentheses: found ')' with no open '(' to close");
      if (first !== OPEN) fail(pos, `expected '(' to start a tree, found ${describe(pos, lineEnd)}`);

      // Invariant at the top of this loop: text[pos] is the '(' of a node to open.
      let root: TreeNode | null = null;
      for (;;) {
        const openPos = pos;
        pos = skipSpace(text, pos + 1, lineEnd);

        // The label: a non-negative decimal integer.
        const labelStart = pos;
        const labelEnd = tokenEnd(text, pos, lineEnd);
        if (labelEnd === labelStart) {
          fail(
            pos,
            `missing label: expected an integer label 0..${numLabels - 1} after '(', found ${describe(pos, lineEnd)}`,
          );
        }
        let label = 0;
        for (let i = labelStart; i < labelEnd; i++) {
          const c = text.charCodeAt(i);
          if (c < DIGIT_0 || c > DIGIT_9) {
            fail(
              labelStart,
              `expected an integer label 0..${numLabels - 1}, found ${quote(text.slice(labelStart, labelEnd))}`,
            );
          }
          label = label * 10 + (c - DIGIT_0);
        }
        if (label >= numLabels) {
          fail(
            labelStart,
            `label ${cut(text.slice(labelStart, labelEnd))} is out of range: expected 0..${numLabels - 1}`,
          );
        }

        pos = skipSpace(text, labelEnd, lineEnd);

        let node: TreeNode;
        if (pos < lineEnd && text.charCodeAt(pos) === OPEN) {
          // An internal node: its children array is allocated at its final size of two.
          node = { label, word: null, children: [PENDING, PENDING] };
        } else {
          if (pos >= lineEnd) missingClose(pos, openPos);
          if (text.charCodeAt(pos) === CLOSE) {
            fail(pos, `empty preterminal: expected a word or two subtrees after label ${label}, found ')'`);
          }
          // A preterminal: exactly one word, then ')'.
          const wordEnd = tokenEnd(text, pos, lineEnd);
          node = { label, word: text.slice(pos, wordEnd), children: [] };
          pos = skipSpace(text, wordEnd, lineEnd);
          if (pos >= lineEnd) missingClose(pos, openPos);
          if (text.charCodeAt(pos) !== CLOSE) {
            fail(
              pos,
              `expected ')' after the word ${quote(node.word!)} of a preterminal, found ${describe(pos, lineEnd)}`,
            );
          }
          pos++;
        }

        const depth = open.length;
        if (depth === 0) root = node;
        else open[depth - 1]!.children[filled[depth - 1]!++] = node;
        if (node.word === null) {
          open.push(node);
          openAt.push(openPos);
          filled.push(0);
          continue; // its first child
        }

        // Close every ancestor whose ')' follows, until one needs another child or the tree is complete.
        let another = false;
        while (open.length > 0) {
          const top = open.length - 1;
          const count = filled[top]!;
          pos = skipSpace(text, pos, lineEnd);
          if (pos >= lineEnd) missingClose(pos, openAt[top]!);
          const c = text.charCodeAt(pos);
          if (c === OPEN) {
            if (count === 2) {
              fail(
                pos,
                `non-binary node: the node opened at column ${columnOf(openAt[top]!)} has a third child; expected exactly two`,
              );
            }
            another = true;
            break;
          }
          if (c !== CLOSE) {
            fail(pos, `expected '(' or ')' after a subtree, found ${describe(pos, lineEnd)}`);
          }
          if (count === 1) {
            fail(
              pos,
              `non-binary node: the node opened at column ${columnOf(openAt[top]!)} has one child that is a subtree; expected a word or two subtrees`,
            );
          }
          open.pop();
          openAt.pop();
          filled.pop();
          pos++;
        }
        if (!another) break;
      }

      pos = skipSpace(text, pos, lineEnd);
      if (pos < lineEnd) {
        if (text.charCodeAt(pos) === CLOSE) fail(pos, "unbalanced parentheses: found ')' with no open '(' to close");
        fail(pos, `expected end of line after the tree, found ${describe(pos, lineEnd)}`);
      }
      trees.push(root!);
    }

    pos = nextLine;
    lineNo++;
    lineStart = pos;
  }

  if (trees.length === 0) {
    throw new TreeFormatError(file, 1, 1, "no trees found: expected one tree per line, e.g. '(3 (2 a) (2 b))'");
  }
  return trees;
}

/** The code points in text[from, to): a pair of surrogates counts once (no array of characters for a 50 MB line). */
function codePoints(text: string, from: number, to: number): number {
  let n = to - from;
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xdc00 && c <= 0xdfff && i > from) {
      const before = text.charCodeAt(i - 1);
      if (before >= 0xd800 && before <= 0xdbff) n--;
    }
  }
  return n;
}

function skipSpace(text: string, pos: number, end: number): number {
  while (pos < end && isSpace(text.charCodeAt(pos))) pos++;
  return pos;
}

/** End of the word or label starting at `pos`: it runs to the next space or parenthesis. */
function tokenEnd(text: string, pos: number, end: number): number {
  while (pos < end) {
    const c = text.charCodeAt(pos);
    if (c === OPEN || c === CLOSE || isSpace(c)) break;
    pos++;
  }
  return pos;
}
