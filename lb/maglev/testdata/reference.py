#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""An independent implementation of lb/maglev, written from its package documentation only.

TestGolden pins the values this script prints: run it after a deliberate change to the table
format and compare. Usage: python3 testdata/reference.py
"""
import struct

M64 = (1 << 64) - 1


def fnv1a64(data, h=14695981039346656037):
    for b in data:
        h = ((h ^ b) * 1099511628211) & M64
    return h


def fmix64(k):
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & M64
    return k ^ (k >> 33)


def build(backends, m, seed):
    """backends: [(name, weight)]; returns table[slot] = index in backends, or -1."""
    order = sorted((i for i, (_, w) in enumerate(backends) if w > 0),
                   key=lambda i: backends[i][0].encode())
    if not order:
        return [-1] * m
    max_w = max(backends[i][1] for i in order)
    turns = []  # [next, skip, weight, credit, index]
    for i in order:
        h = fnv1a64(struct.pack('<I', seed) + backends[i][0].encode())
        turns.append([fmix64(h) % m, fmix64(h ^ 0x9E3779B97F4A7C15) % (m - 1) + 1,
                      backends[i][1], max_w // 2, i])
    table, left = [-1] * m, m
    while True:
        for t in turns:
            t[3] += t[2]
            if t[3] < max_w:
                continue
            t[3] -= max_w
            while table[t[0]] >= 0:
                t[0] = (t[0] + t[1]) % m
            table[t[0]] = t[4]
            t[0] = (t[0] + t[1]) % m
            left -= 1
            if left == 0:
                return table


def checksum(table):
    return fnv1a64(b''.join(struct.pack('<i', v) for v in table))


def names(n):
    return ['198.18.%d.%d:8080' % (i // 250, i % 250 + 1) for i in range(n)]


if __name__ == '__main__':
    three = ['198.18.1.%d:8080' % (10 + i) for i in range(6)]
    for ws, seed in [([1, 1, 1], 1), ([1, 1, 1], 2), ([1, 2, 3], 1), ([3, 3, 3, 3, 3, 40], 1)]:
        print('M=13 weights %s seed %d: %s' % (ws, seed, build(list(zip(three, ws)), 13, seed)))
    for label, n, m, weight, seed in [
            ('N=1000 equal weights', 1000, 65537, lambda i: 1, 1),
            ('N=100 weights 1..100', 100, 16381, lambda i: 1 + i * 37 % 100, 7),
            ('N=40 weights 200,1,1,...', 40, 251, lambda i: 200 if i == 0 else 1, 3)]:
        bs = [(name, weight(i)) for i, name in enumerate(names(n))]
        print('%s M=%d seed %d: checksum %#018x' % (label, m, seed, checksum(build(bs, m, seed))))
    h = fnv1a64(struct.pack('<I', 1) + b'198.18.1.10:8080')
    print('nameHash(1, "198.18.1.10:8080") = %#x; offset, skip at M=65537 = %d, %d' % (
        h, fmix64(h) % 65537, fmix64(h ^ 0x9E3779B97F4A7C15) % 65536 + 1))
