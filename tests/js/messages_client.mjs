// Drives /v1/messages and /v1/responses with the official clients (filled in below).
console.log('ok 0 - placeholder');
