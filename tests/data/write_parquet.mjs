// Writes the parquet files of the parquet reader's test with an independent writer: nodejs-polars
// (Rust's polars-parquet), installed by scripts/setup.sh into $NANODDP_CACHE/npm/node_modules.
//   node tests/data/write_parquet.mjs TEXTS.json OUT_DIR
// TEXTS.json is {"unique": [...], "repeated": [...]}, strings or null. For each codec (uncompressed,
// snappy, zstd) it writes OUT_DIR/unique_CODEC.parquet and OUT_DIR/repeated_CODEC.parquet with the
// columns id (the row number) and text, in row groups of 256 rows and data pages of about 1 KiB,
// so that a file has several row groups and a chunk several pages. polars writes the unique texts
// as PLAIN pages and the few repeated ones as dictionary pages (a row group under 256 rows is
// always dictionary-encoded, one of 256 or more only when it has few distinct values); the test
// checks that it did.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { homedir } from "node:os";
import { join } from "node:path";

const [textsPath, outDir] = process.argv.slice(2);
if (!textsPath || !outDir) {
  console.error("usage: node write_parquet.mjs TEXTS.json OUT_DIR");
  process.exit(2);
}
const modules = join(process.env.NANODDP_CACHE || join(homedir(), ".cache/nanoddp"), "npm/node_modules");
const pl = createRequire(join(modules, "noop.js"))("nodejs-polars");
const texts = JSON.parse(readFileSync(textsPath, "utf8"));
for (const name of ["unique", "repeated"]) {
  const column = texts[name];
  const df = pl.DataFrame({
    id: pl.Series("id", column.map((_, i) => i), pl.Int64),
    text: pl.Series("text", column, pl.Utf8),
  });
  for (const compression of ["uncompressed", "snappy", "zstd"]) {
    const options = { compression, rowGroupSize: 256, dataPagesizeLimit: 1024 };
    df.lazy().sinkParquet(join(outDir, `${name}_${compression}.parquet`), options).collect();
  }
}
