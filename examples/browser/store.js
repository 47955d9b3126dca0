/* global indexedDB */
/**
 * The paused run in this browser's IndexedDB: its checkpoint bytes (the trainer's `SSLZCKP1`
 * format), the decoded images it trains on and the loss history, under one key, so that a
 * reload continues where the run stopped.
 */
const DB = 'ssl-zoo-page';
const STORE = 'runs';
const KEY = 'current';

function open() {
  return new Promise((resolve, reject) => {
    const request = indexedDB.open(DB, 1);
    request.onupgradeneeded = () => request.result.createObjectStore(STORE);
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

async function transact(mode, action) {
  const db = await open();
  try {
    return await new Promise((resolve, reject) => {
      const tx = db.transaction(STORE, mode);
      const request = action(tx.objectStore(STORE));
      tx.oncomplete = () => resolve(request.result);
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
  } finally {
    db.close();
  }
}

/** Saves `run` (`{ checkpoint, images, history, step, settings, savedAt }`). */
export function saveRun(run) {
  return transact('readwrite', (store) => store.put(run, KEY));
}

/** The saved run, or undefined. */
export function loadRun() {
  return transact('readonly', (store) => store.get(KEY));
}

export function clearRun() {
  return transact('readwrite', (store) => store.delete(KEY));
}
