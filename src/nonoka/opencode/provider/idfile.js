/**
 * The persisted copy of the chat session id: `<cwd>/.nonoka/provider-session.id`.
 *
 * Only the session id crosses a process boundary, so it is kept on disk between runs of the
 * host. The file is a copy, never the authority (the history decides whether a
 * conversation is new), and its content is untrusted: anything that does not look like a
 * session id is ignored with a warning. It is written atomically (temp file + rename) so a
 * crash never leaves half an id behind. Same rules as `nonoka.provider.idfile`.
 */
import { randomBytes } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
export const STATE_DIR_NAME = ".nonoka";
export const ID_FILE_NAME = "provider-session.id";
/** A session id is at most 128 characters; a file far larger is not one (don't slurp it). */
const MAX_FILE_BYTES = 4096;
/** `nonoka.state.ids.SESSION_ID_PATTERN`. */
const SESSION_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
export function idFilePath(cwd) {
    return path.join(cwd, STATE_DIR_NAME, ID_FILE_NAME);
}
export function isPlausibleSessionId(value) {
    return typeof value === "string" && SESSION_ID_PATTERN.test(value);
}
/**
 * The id stored at `file`, or `undefined` when there is none usable.
 *
 * Surrounding whitespace (an editor's trailing newline) is allowed. A missing file is normal;
 * an unreadable one or content that is not a plausible id is reported through `warn` and
 * ignored, so a damaged file can never steer a request into a session.
 */
export function readSessionId(file, warn = () => { }) {
    let data;
    try {
        const fd = fs.openSync(file, "r");
        try {
            const buffer = Buffer.alloc(MAX_FILE_BYTES + 1);
            const size = fs.readSync(fd, buffer, 0, buffer.length, 0);
            data = buffer.subarray(0, size);
        }
        finally {
            fs.closeSync(fd);
        }
    }
    catch (error) {
        if (error.code !== "ENOENT") {
            warn(`ignoring the provider session id file ${file}: cannot read it (${error.message})`);
        }
        return undefined;
    }
    if (data.length > MAX_FILE_BYTES) {
        warn(`ignoring the provider session id file ${file}: it is over ${MAX_FILE_BYTES} bytes, far too long for a session id`);
        return undefined;
    }
    let text;
    try {
        text = new TextDecoder("utf-8", { fatal: true }).decode(data).trim();
    }
    catch {
        warn(`ignoring the provider session id file ${file}: it is not UTF-8 text`);
        return undefined;
    }
    if (text === "") {
        return undefined;
    }
    if (!isPlausibleSessionId(text)) {
        warn(`ignoring the provider session id file ${file}: its content is not a plausible session id ` +
            "(expected 1-128 letters, digits, '.', '_', ':' or '-'); the next request will start or recover a session");
        return undefined;
    }
    return text;
}
/**
 * Store `sessionId` at `file` atomically, readable by the owner only (0600).
 *
 * A missing parent directory is created with mode 0700 (an existing one is left alone: the
 * bridge shares it). The id goes to a temp file in the same directory, is flushed, and is
 * renamed over the old file, so a reader sees the old id or the new one, never a mix.
 */
export function writeSessionId(file, sessionId) {
    if (!isPlausibleSessionId(sessionId)) {
        throw new Error(`refusing to store ${JSON.stringify(sessionId)}: not a session id`);
    }
    const dir = path.dirname(file);
    if (!fs.existsSync(dir)) {
        fs.mkdirSync(dir, { mode: 0o700 });
        fs.chmodSync(dir, 0o700); // mkdir's mode is filtered by the umask; set it exactly
    }
    const tmp = path.join(dir, `.${path.basename(file)}.${randomBytes(6).toString("hex")}.tmp`);
    const fd = fs.openSync(tmp, "wx", 0o600);
    try {
        try {
            fs.fchmodSync(fd, 0o600);
            fs.writeSync(fd, `${sessionId}\n`);
            fs.fsyncSync(fd);
        }
        finally {
            fs.closeSync(fd);
        }
        fs.renameSync(tmp, file);
    }
    catch (error) {
        fs.rmSync(tmp, { force: true });
        throw error;
    }
    fsyncDir(dir);
}
/** Remove the stored id, so a stale copy cannot outlive the in-memory id it mirrors. */
export function clearSessionId(file) {
    fs.rmSync(file, { force: true });
}
/** Make the rename itself durable; best effort (not every platform allows it). */
function fsyncDir(dir) {
    let fd;
    try {
        fd = fs.openSync(dir, "r");
    }
    catch {
        return;
    }
    try {
        fs.fsyncSync(fd);
    }
    catch {
        // some file systems refuse fsync on a directory; the rename is still atomic
    }
    finally {
        fs.closeSync(fd);
    }
}
