// Passkeys on the confirmation service's pages: adding one (/account) and
// signing in with one (/login). The only script the pages load; served from
// this origin (Content-Security-Policy: script-src 'self'). Every page works
// without it except for what needs the authenticator.
'use strict';

const b64u = {
  enc(buf) {
    const bytes = new Uint8Array(buf);
    let s = '';
    for (const b of bytes) s += String.fromCharCode(b);
    return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  },
  dec(text) {
    const s = atob(text.replace(/-/g, '+').replace(/_/g, '/'));
    const out = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out.buffer;
  },
};

async function post(url, body) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json' },
    credentials: 'same-origin',
    body: JSON.stringify(body),
  });
  let answer = {};
  try { answer = await res.json(); } catch { /* not JSON */ }
  if (!res.ok) {
    const e = new Error(answer.error_description || `the service answered ${res.status}`);
    e.answer = answer;
    throw e;
  }
  return answer;
}

function say(id, text) {
  const el = document.getElementById(id);
  if (el) { el.textContent = text; el.hidden = false; }
}

function withIds(list) {
  return (list || []).map((c) => ({ ...c, id: b64u.dec(c.id) }));
}

async function addPasskey(button) {
  const form = button.closest('[data-passkey-form]');
  const csrf = form.querySelector('input[name=csrf]').value;
  const name = form.querySelector('input[name=name]').value;
  try {
    const begun = await post('/account/passkeys/begin', { csrf, name });
    const o = begun.options;
    o.challenge = b64u.dec(o.challenge);
    o.user.id = b64u.dec(o.user.id);
    o.excludeCredentials = withIds(o.excludeCredentials);
    const cred = await navigator.credentials.create({ publicKey: o });
    await post('/account/passkeys/finish', {
      csrf,
      ceremony: begun.ceremony,
      id: cred.id,
      client_data: b64u.enc(cred.response.clientDataJSON),
      attestation_object: b64u.enc(cred.response.attestationObject),
    });
    // Back on the account page, with the confirmation that sent the person
    // here (the server checked it when it rendered the page, and checks it
    // again on this load).
    const back = form.dataset.back;
    window.location.assign(back ? `/account?added=1&back=${encodeURIComponent(back)}` : '/account?added=1');
  } catch (e) {
    if (e.answer && e.answer.reauth) { window.location.assign(form.dataset.reauth || e.answer.reauth); return; }
    say('passkey-status', `The passkey was not added: ${e.message}`);
  }
}

async function signInWithPasskey(button) {
  const form = button.closest('[data-passkey-form]');
  const csrf = form.querySelector('input[name=csrf]').value;
  const next = form.querySelector('input[name=next]').value;
  try {
    const begun = await post('/login/passkey/begin', { csrf });
    const o = begun.options;
    o.challenge = b64u.dec(o.challenge);
    o.allowCredentials = withIds(o.allowCredentials);
    const cred = await navigator.credentials.get({ publicKey: o });
    const done = await post('/login/passkey/finish', {
      csrf,
      next,
      ceremony: begun.ceremony,
      id: cred.id,
      client_data: b64u.enc(cred.response.clientDataJSON),
      authenticator_data: b64u.enc(cred.response.authenticatorData),
      signature: b64u.enc(cred.response.signature),
      user_handle: cred.response.userHandle ? b64u.enc(cred.response.userHandle) : '',
    });
    window.location.assign(done.next);
  } catch (e) {
    say('passkey-status', `Signing in with a passkey did not work: ${e.message}`);
  }
}

/** §14: Accept on a page whose request asks for a passkey gets the
 * assertion over this very decision first, then posts the form with it. */
async function acceptWithPasskey(form, accept) {
  try {
    const body = new URLSearchParams(new FormData(form));
    body.set('decision', 'accept');
    const res = await fetch(form.dataset.passkeyDecision, {
      method: 'POST', credentials: 'same-origin', body,
      headers: { accept: 'application/json' },
    });
    const answer = await res.json().catch(() => ({}));
    if (!res.ok) throw new Error(answer.error_description || `the service answered ${res.status}`);
    const o = answer.options;
    o.challenge = b64u.dec(o.challenge);
    o.allowCredentials = withIds(o.allowCredentials);
    const cred = await navigator.credentials.get({ publicKey: o });
    form.querySelector('input[name=passkey_id]').value = cred.id;
    form.querySelector('input[name=passkey_client_data]').value = b64u.enc(cred.response.clientDataJSON);
    form.querySelector('input[name=passkey_authenticator_data]').value = b64u.enc(cred.response.authenticatorData);
    form.querySelector('input[name=passkey_signature]').value = b64u.enc(cred.response.signature);
    form.dataset.passkeyDone = '1';
    form.requestSubmit(accept);
  } catch (e) {
    say('passkey-status', `Not accepted: ${e.message}`);
  }
}

document.addEventListener('DOMContentLoaded', () => {
  const decision = document.querySelector('form[data-passkey-decision]');
  if (decision) {
    const accept = decision.querySelector('button[name=decision][value=accept]');
    decision.addEventListener('submit', (event) => {
      if (event.submitter === accept && !decision.dataset.passkeyDone) {
        event.preventDefault();
        acceptWithPasskey(decision, accept);
      }
    });
  }
  const supported = !!(window.PublicKeyCredential && navigator.credentials);
  for (const el of document.querySelectorAll('[data-passkey]')) {
    if (!supported) {
      el.disabled = true;
      say('passkey-status', 'This browser cannot use passkeys.');
      continue;
    }
    el.hidden = false;
    el.addEventListener('click', () => {
      if (el.dataset.passkey === 'add') addPasskey(el);
      else signInWithPasskey(el);
    });
  }
});
