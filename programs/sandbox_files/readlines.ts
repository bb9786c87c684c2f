// readLines, as in Deno std 0.186 io/mod.ts: the one module DSPy's sandbox runner imports
// from the web. An import map points that URL here, so the sandbox starts offline.
export async function* readLines(reader: { read(p: Uint8Array): Promise<number | null> }, decoderOpts?: { encoding?: string; fatal?: boolean; ignoreBOM?: boolean }): AsyncGenerator<string> {
  const decoder = new TextDecoder(decoderOpts?.encoding ?? "utf-8", decoderOpts);
  const buf = new Uint8Array(64 * 1024);
  let pending = "";
  while (true) {
    const n = await reader.read(buf);
    if (n === null) break;
    pending += decoder.decode(buf.subarray(0, n), { stream: true });
    let i: number;
    while ((i = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, i);
      pending = pending.slice(i + 1);
      yield line.endsWith("\r") ? line.slice(0, -1) : line;
    }
  }
  pending += decoder.decode();
  if (pending.length > 0) yield pending;
}
