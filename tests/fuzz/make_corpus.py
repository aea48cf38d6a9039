#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/seed-*): a few small, valid
inputs per target, so libFuzzer starts from files the parsers accept and mutates from there instead
of first having to discover each format's magic numbers and layout.

The seeds are committed; this script documents how they were made and remakes them after a format
change. It never touches the other files under corpus/: inputs that once crashed a parser
(named after the bug, not seed-*) stay as regression inputs.
Usage: make_corpus.py [corpus folder, default: the one beside this script]
"""
import base64
import json
import pathlib
import struct
import sys

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent / "corpus")


def write(target, name, data):
    folder = out / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"seed-{name}").write_bytes(data)


# --- rendezvous store wire format (src/rendezvous/store_protocol.h): u32 big-endian frame length,
# then u8 ops/statuses, i64 big-endian integers and u32-length-prefixed byte strings.
def frame(*fields):
    payload = b"".join(fields)
    return struct.pack(">I", len(payload)) + payload


def u8(v):
    return bytes([v])


def i64(v):
    return struct.pack(">q", v)


def s(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack(">I", len(b)) + b


HELLO, SET, GET, ADD, COMPARE_SET, ERASE, CHECK, WAIT = range(1, 9)
OK, VALUE, INT, TIMEOUT, ERROR = range(5)
write("store_protocol", "hello", frame(u8(HELLO), s("nanoddp-store"), i64(1), s("job-token")))
write("store_protocol", "session", b"".join([
    frame(u8(HELLO), s("nanoddp-store"), i64(1), s("")),
    frame(u8(SET), s("rank/0/addr"), s(b"10.0.0.1:29500")),
    frame(u8(GET), s("rank/0/addr"), i64(30000)),
    frame(u8(ADD), s("barrier/count"), i64(1)),
    frame(u8(COMPARE_SET), s("leader"), s(b""), s(b"rank0")),
    frame(u8(ERASE), s("leader")),
    frame(u8(CHECK), i64(2), s("a"), s("b")),
    frame(u8(WAIT), i64(2), s("a"), s("b"), i64(-1)),
]))
write("store_protocol", "replies", b"".join([
    frame(u8(OK)),
    frame(u8(VALUE), s(b"\x00\x01value")),
    frame(u8(INT), i64(-7)),
    frame(u8(TIMEOUT), i64(1), s("missing/key")),
    frame(u8(ERROR), s("wrong token: set NANODDP_STORE_TOKEN")),
]))


# --- token shards (src/data/shard.h): 256 little-endian int32 of header, then the tokens.
def shard(magic, version, tokens, fmt):
    header = struct.pack("<3i", magic, version, len(tokens)) + bytes(4 * 253)
    return header + struct.pack(f"<{len(tokens)}{fmt}", *tokens)


write("shard", "u16", shard(20240520, 1, [50256, 15496, 11, 995, 0, 65535, 7, 7], "H"))
write("shard", "u32", shard(20240801, 7, [100257, 9906, 1917, 0, 4294967295], "I"))
write("shard", "empty", shard(20240520, 1, [], "H"))


# --- safetensors (src/core/safetensors.h): u64 little-endian header length, JSON header, data.
def safetensors(tensors, metadata=None):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


write("safetensors", "checkpoint", safetensors({
    "wte": ("F32", [2, 3], struct.pack("<6f", 0.5, -1, 2, 0, 1e-3, 3)),
    "step": ("I64", [], struct.pack("<q", 1200)),
}, {"format": "nanoddp", "depth": "4"}))
write("safetensors", "dtypes", safetensors({
    "a": ("BF16", [2], b"\x80\x3f\x00\x40"),
    "b": ("U16", [1, 2], struct.pack("<2H", 1, 65535)),
    "c": ("U32", [1], struct.pack("<I", 7)),
    "d": ("I32", [1, 1, 1], struct.pack("<i", -5)),
    "e": ("U8", [0], b""),
    "f": ("F64", [1], struct.pack("<d", 3.25)),
}))
write("safetensors", "empty", safetensors({}))


# --- tokenizer files (src/data/tokenizer_file.h): "base64 rank" lines, then (the target's layout)
# a NUL byte and the JSON sidecar.
def tokenizer(merged, pattern, specials, bos):
    tokens = [bytes([b]) for b in range(256)] + merged
    lines = "".join(f"{base64.b64encode(t).decode()} {r}\n" for r, t in enumerate(tokens))
    side = {"format": "nanoddp-bpe", "version": 1, "pattern": pattern, "bos": bos,
            "special_tokens": {text: len(tokens) + k for k, text in enumerate(specials)}}
    return lines.encode() + b"\x00" + json.dumps(side).encode()


nanochat = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|"""
            r"""\s+(?!\S)|\s+""")
gpt2 = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
write("tokenizer_file", "nanochat", tokenizer([b"Hi", b"it", b"'s", b" 20", b"24", b"ca", b"caf"], nanochat,
                                              ["<|bos|>", "<|user_start|>", "<|user_end|>"], "<|bos|>"))
write("tokenizer_file", "gpt2", tokenizer([b" c", b"af", b"\xc3\xa9", b"\n\n"], gpt2, ["<|endoftext|>"],
                                          "<|endoftext|>"))

# --- parquet (src/data/parquet.h): the seeds corpus/parquet/seed-{unique,repeated}_{codec} are not
# written here but by an independent writer, nodejs-polars, with the parquet test's script:
#   texts.json = {"unique": ["t0", "t1", ... "t299"] with every 9th (from the 5th) null,
#                 "repeated": 30 rows of "x", "yy", "" in turn with every 5th (from the 2nd) null}
#   node tests/data/write_parquet.mjs texts.json corpus/parquet   (then each NAME.parquet -> seed-NAME)
# unique_* has a row group of PLAIN pages and one dictionary-encoded; repeated_* one dictionary-encoded.
