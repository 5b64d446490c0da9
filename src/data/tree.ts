/**
 * Labelled binary constituency trees, the input of the tree-structured models (Tree-LSTM, RvNN).
 *
 * The helpers walk trees with explicit stacks rather than recursion: the reader accepts trees of any depth, so
 * nothing downstream of it should be the first place a deep tree overflows the call stack.
 */

/** A node of a labelled binary constituency tree. A preterminal `(2 word)` has `word` set and no children;
 *  every other node has exactly two children and `word === null`. */
export interface TreeNode {
  label: number;
  word: string | null;
  children: TreeNode[];
}

/** Number of nodes (preterminals + internal). */
export function treeSize(t: TreeNode): number {
  let count = 0;
  const stack: TreeNode[] = [t];
  while (stack.length > 0) {
    const node = stack.pop()!;
    count++;
    for (const child of node.children) stack.push(child);
  }
  return count;
}

/** Height of the tree, counting a preterminal as 0. */
export function treeHeight(t: TreeNode): number {
  let height = 0;
  const stack: { node: TreeNode; depth: number }[] = [{ node: t, depth: 0 }];
  while (stack.length > 0) {
    const { node, depth } = stack.pop()!;
    if (depth > height) height = depth;
    for (const child of node.children) stack.push({ node: child, depth: depth + 1 });
  }
  return height;
}

/** The words at the preterminals, left to right. */
export function treeWords(t: TreeNode): string[] {
  const words: string[] = [];
  const stack: TreeNode[] = [t];
  while (stack.length > 0) {
    const node = stack.pop()!;
    if (node.word !== null) words.push(node.word);
    // Pushed right to left so that the left child is popped, and so emitted, first.
    for (let i = node.children.length - 1; i >= 0; i--) stack.push(node.children[i]!);
  }
  return words;
}

/** The PTB s-expression of the tree, single-spaced, as SST files write it: `(3 (2 a) (2 b))`. */
export function formatTree(t: TreeNode): string {
  const parts: string[] = [];
  // A string on the stack is text to emit; a node is a subtree still to open.
  const stack: (TreeNode | string)[] = [t];
  while (stack.length > 0) {
    const item = stack.pop()!;
    if (typeof item === "string") {
      parts.push(item);
      continue;
    }
    if (item.word !== null) {
      parts.push(`(${item.label} ${item.word})`);
      continue;
    }
    parts.push(`(${item.label}`);
    stack.push(")");
    for (let i = item.children.length - 1; i >= 0; i--) {
      stack.push(item.children[i]!);
      stack.push(" ");
    }
  }
  return parts.join("");
}
