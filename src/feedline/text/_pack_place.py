"""The placement of a block's pieces into rows: first fit and best fit, as plain
Python over numpy arrays that numba compiles as they stand (``_pack_jit``); run as
Python when numba is missing (the same rows). ``_pack_plan`` sorts the pieces and
calls them.
"""

import numpy as np


def place_first_fit(size, block_ptr, cap, local, per_block):
    """First fit over each block's pieces (sorted): ``local[i]`` is piece i's row in its
    block, ``per_block[b]`` block b's rows. A max-tree over the block's possible rows
    (all ``cap`` until used; rows open left to right, so the leftmost leaf with room is
    the first open row that fits, or the next new one)."""
    for b in range(len(block_ptr) - 1):
        lo, hi = block_ptr[b], block_ptr[b + 1]
        leaves = 1
        while leaves < hi - lo:
            leaves *= 2
        tree = np.full(2 * leaves, cap, dtype=np.int64)
        used = 0
        for i in range(lo, hi):
            s = size[i]
            node = 1
            while node < leaves:
                node = 2 * node if tree[2 * node] >= s else 2 * node + 1
            r = node - leaves
            local[i] = r
            if r + 1 > used:
                used = r + 1
            tree[node] -= s
            node //= 2
            while node >= 1:
                left, right = tree[2 * node], tree[2 * node + 1]
                tree[node] = left if left > right else right
                node //= 2
        per_block[b] = used


def place_best_fit(size, block_ptr, cap, local, per_block):
    """Best fit over each block's pieces (sorted): the open row whose room is the
    smallest that holds the piece. Rows are kept by room: a stack per room value
    (``head``, ``nxt``) and a tree over the room values flagging those that have a row,
    to find the smallest room >= the piece in O(log cap). (The tree's updates are
    written out inline: numba compiles this function as it stands.)"""
    leaves = 1
    while leaves < cap + 1:
        leaves *= 2
    tree = np.zeros(2 * leaves, dtype=np.uint8)
    head = np.full(cap + 1, -1, dtype=np.int64)
    most = 1
    for b in range(len(block_ptr) - 1):
        most = max(most, block_ptr[b + 1] - block_ptr[b])
    nxt = np.empty(most, dtype=np.int64)
    room = np.empty(most, dtype=np.int64)
    for b in range(len(block_ptr) - 1):
        used = 0
        for i in range(block_ptr[b], block_ptr[b + 1]):
            s = size[i]
            # c: the smallest flagged room >= s, or -1 (climb from leaf s, then down)
            node = s + leaves
            c = s if tree[node] else -1
            while c < 0 and node > 1:
                if node % 2 == 0 and tree[node + 1]:
                    node += 1
                    while node < leaves:
                        node = 2 * node if tree[2 * node] else 2 * node + 1
                    c = node - leaves
                node //= 2
            if c < 0:  # no open row holds it: a new row
                r = used
                used += 1
                left = cap - s
            else:
                r = head[c]
                head[c] = nxt[r]
                if head[c] < 0:  # the last row of that room: unflag it
                    node = c + leaves
                    tree[node] = 0
                    node //= 2
                    while node >= 1 and tree[node] and not (tree[2 * node] | tree[2 * node + 1]):
                        tree[node] = 0
                        node //= 2
                left = c - s
            local[i] = r
            room[r] = left
            if left > 0:
                if head[left] < 0:  # the first row of that room: flag it
                    node = left + leaves
                    while node >= 1 and not tree[node]:
                        tree[node] = 1
                        node //= 2
                nxt[r] = head[left]
                head[left] = r
        for r in range(used):  # empty the rooms for the next block
            c = room[r]
            if c > 0 and head[c] >= 0:
                head[c] = -1
                node = c + leaves
                tree[node] = 0
                node //= 2
                while node >= 1 and tree[node] and not (tree[2 * node] | tree[2 * node + 1]):
                    tree[node] = 0
                    node //= 2
        per_block[b] = used
