import assert from "node:assert/strict";
import { mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterEach, beforeEach, describe, test } from "node:test";

import {
  clearSessionId,
  idFilePath,
  readSessionId,
  SessionTracker,
  writeSessionId,
  type ProtocolMessage,
  type SessionInitEvent,
} from "nonoka-opencode-provider";

import { tempDir } from "./helpers.js";

let tmp: { dir: string; done: () => void };
beforeEach(() => {
  tmp = tempDir();
});
afterEach(() => tmp.done());

const init = (id: string): SessionInitEvent => ({ type: "session_init", session_id: id, recovered: false });
const u = (content: string): ProtocolMessage => ({ role: "user", content });
const a = (content: string): ProtocolMessage => ({ role: "assistant", content });

describe("the id file", () => {
  test("is written atomically with mode 0600 in a 0700 directory, and read back", () => {
    const file = idFilePath(tmp.dir);
    writeSessionId(file, "6f1c2a9e-3b7d-4e55-9d0a-2c8b1f4e7a10");
    assert.equal(readFileSync(file, "utf8"), "6f1c2a9e-3b7d-4e55-9d0a-2c8b1f4e7a10\n");
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.equal(statSync(path.dirname(file)).mode & 0o777, 0o700);
    assert.equal(readSessionId(file), "6f1c2a9e-3b7d-4e55-9d0a-2c8b1f4e7a10");
    writeSessionId(file, "second-id");
    assert.equal(readSessionId(file), "second-id");
    clearSessionId(file);
    assert.equal(readSessionId(file), undefined);
    clearSessionId(file); // a missing file is fine
  });

  test("ignores content that is not a plausible id, with a warning", () => {
    const file = idFilePath(tmp.dir);
    mkdirSync(path.dirname(file));
    const warnings: string[] = [];
    for (const junk of ["../../etc/passwd", "id with spaces", "-leading-dash", "x".repeat(129), "x".repeat(5000), "\xff\xfe"]) {
      writeFileSync(file, junk, junk === "\xff\xfe" ? "latin1" : "utf8");
      assert.equal(readSessionId(file, (m) => warnings.push(m)), undefined, junk.slice(0, 20));
    }
    assert.equal(warnings.length, 6);
    writeFileSync(file, "  abc-123\n\n");
    assert.equal(readSessionId(file), "abc-123");
    writeFileSync(file, "\n");
    assert.equal(readSessionId(file), undefined);
    assert.throws(() => writeSessionId(file, "no spaces allowed"), /not a session id/);
  });
});

describe("SessionTracker: the id file on every step", () => {
  test("is written when the reported id changes or the file is gone, not again for the same id", () => {
    const tracker = new SessionTracker(tmp.dir);
    const file = idFilePath(tmp.dir);
    tracker.adopt("chat", "k", init("sess-one"));
    const first = statSync(file).ino;
    tracker.adopt("chat", "k", init("sess-one")); // the next step of the same conversation
    assert.equal(statSync(file).ino, first, "the file was not rewritten");
    clearSessionId(file); // lost between steps: written again
    tracker.adopt("chat", "k", init("sess-one"));
    assert.equal(readSessionId(file), "sess-one");
    writeFileSync(file, "sess-other\n"); // another host wrote its own: this one's id goes back
    tracker.adopt("chat", "k", init("sess-one"));
    assert.equal(readSessionId(file), "sess-one");
    tracker.adopt("chat", "k", init("sess-two"));
    assert.equal(readSessionId(file), "sess-two");
  });
});

describe("SessionTracker: new conversation or continuation, and the conversation key", () => {
  test("a new conversation forgets the held id and its file, and sends new_session", () => {
    const first = new SessionTracker(tmp.dir);
    assert.deepEqual(first.prepare([u("hi")], "chat").newSession, true);
    first.adopt("chat", "k1", init("sess-a"));
    assert.equal(readSessionId(first.idFile), "sess-a");

    // A new process (the next `opencode run --continue`) reads the id back.
    const second = new SessionTracker(tmp.dir);
    assert.equal(second.sessionId, "sess-a");
    const hint = second.prepare([u("hi"), a("hello"), u("more")], "chat");
    assert.equal(hint.newSession, false);
    assert.equal(hint.sessionId, "sess-a");
    assert.match(hint.conversationKey ?? "", /^[0-9a-f]{64}$/);

    const fresh = second.prepare([u("a brand new conversation")], "chat");
    assert.deepEqual(fresh.newSession, true);
    assert.equal(fresh.sessionId, undefined);
    assert.equal(second.sessionId, undefined);
    assert.equal(readSessionId(second.idFile), undefined);
  });

  test("title requests keep their own id and never touch the chat id", () => {
    const tracker = new SessionTracker(tmp.dir);
    const chat = tracker.prepare([u("write a file")], "chat");
    tracker.adopt("chat", chat.conversationKey, init("chat-1"));
    const title = tracker.prepare([u("Generate a title for this conversation:\n"), u("write a file")], "title");
    assert.equal(title.newSession, true);
    assert.equal(title.conversationKey, undefined, "title requests carry no conversation key");
    tracker.adopt("title", undefined, init("title-1"));
    assert.equal(tracker.sessionId, "chat-1");
    assert.equal(tracker.titleSessionId, "title-1");
    assert.equal(readSessionId(tracker.idFile), "chat-1");
    assert.equal(tracker.prepare([u("write a file"), a("done"), u("thanks")], "chat").sessionId, "chat-1");
  });

  test("alternating conversations each send their own id, never the other's", () => {
    const tracker = new SessionTracker(tmp.dir);
    const one = tracker.prepare([u("one")], "chat");
    tracker.adopt("chat", one.conversationKey, init("sess-one"));
    const two = tracker.prepare([u("two")], "chat");
    tracker.adopt("chat", two.conversationKey, init("sess-two"));
    assert.equal(tracker.prepare([u("one"), a("r"), u("one more")], "chat").sessionId, "sess-one");
    assert.equal(tracker.prepare([u("two"), a("r"), u("two more")], "chat").sessionId, "sess-two");
  });

  test("an id read from the file is sent for any continuation; the bridge checks it", () => {
    writeSessionId(idFilePath(tmp.dir), "from-disk");
    const tracker = new SessionTracker(tmp.dir);
    assert.equal(tracker.prepare([u("x"), a("y"), u("z")], "chat").sessionId, "from-disk");
  });

  test("an unknown conversation after a known one sends no id, so the bridge recovers by key", () => {
    const tracker = new SessionTracker(tmp.dir);
    const one = tracker.prepare([u("one")], "chat");
    tracker.adopt("chat", one.conversationKey, init("sess-one"));
    const other = tracker.prepare([u("other"), a("r"), u("again")], "chat");
    assert.equal(other.newSession, false);
    assert.equal(other.sessionId, undefined);
  });
});
