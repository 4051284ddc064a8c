#!/usr/bin/env node
// KafkaJS against a kaas cluster over SASL_SSL with SCRAM-SHA-512 (issue 21), run by
// tests/integration/test_other_clients.py:
//
//   node kafkajs_check.js BOOTSTRAP CA_FILE USER PASSWORD [TOPIC]
//   (or KAAS_BOOTSTRAP, KAAS_CA, KAAS_USER, KAAS_PASSWORD, KAAS_TOPIC in the environment)
//
// The admin client creates TOPIC (3 partitions); a plain producer sends plain0..plain5; a
// transactional producer commits one transaction (c0..c5) and aborts another (a0..a5); a
// plain producer then sends one end-N record to each partition. A read_committed consumer
// (readUncommitted: false) reads from the beginning until it has an end record from every
// partition (they lie after the abort marker) and the result goes to stdout as one JSON
// object: {"topic", "partitions", "consumed": [{"partition", "offset", "value"}], ...}.
// Any failure: the error on stderr and exit status 1.
'use strict'

const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

const PARTITIONS = 3
const TIMEOUT_MS = Number(process.env.KAAS_JS_TIMEOUT_MS || 90000)

function settings () {
  const [bootstrap, ca, user, password, topic] = process.argv.slice(2)
  const s = {
    bootstrap: bootstrap || process.env.KAAS_BOOTSTRAP,
    ca: ca || process.env.KAAS_CA,
    user: user || process.env.KAAS_USER,
    password: password || process.env.KAAS_PASSWORD,
    topic: topic || process.env.KAAS_TOPIC || `kafkajs-${process.pid}-${Date.now()}`
  }
  for (const k of ['bootstrap', 'ca', 'user', 'password']) {
    if (!s[k]) throw new Error(`missing ${k}: usage: node kafkajs_check.js BOOTSTRAP CA_FILE USER PASSWORD [TOPIC]`)
  }
  return s
}

function values (prefix, n) {
  return Array.from({ length: n }, (_, i) => ({ value: `${prefix}${i}`, partition: i % PARTITIONS }))
}

async function main () {
  const s = settings()
  const kafka = new Kafka({
    clientId: 'kaas-kafkajs-check',
    brokers: s.bootstrap.split(','),
    ssl: { ca: [fs.readFileSync(s.ca, 'utf8')] },
    sasl: { mechanism: 'scram-sha-512', username: s.user, password: s.password },
    connectionTimeout: 10000,
    requestTimeout: 30000,
    logLevel: logLevel.WARN
  })
  const result = progress
  Object.assign(result, { topic: s.topic, partitions: PARTITIONS })

  const admin = kafka.admin()
  await admin.connect()
  result.created = await admin.createTopics({
    topics: [{ topic: s.topic, numPartitions: PARTITIONS, replicationFactor: 1 }],
    waitForLeaders: true
  })
  const md = await admin.fetchTopicMetadata({ topics: [s.topic] })
  result.leaders = md.topics[0].partitions.map(p => p.leader).sort()

  const producer = kafka.producer()
  await producer.connect()
  await producer.send({ topic: s.topic, acks: -1, messages: values('plain', 6) })

  const txp = kafka.producer({ transactionalId: `kafkajs-tx-${process.pid}-${Date.now()}`, idempotent: true, maxInFlightRequests: 1 })
  await txp.connect()
  const committed = await txp.transaction()
  await committed.send({ topic: s.topic, messages: values('c', 6) })
  await committed.commit()
  const aborted = await txp.transaction()
  await aborted.send({ topic: s.topic, messages: values('a', 6) })
  await aborted.abort()
  await txp.disconnect()

  const ends = Array.from({ length: PARTITIONS }, (_, p) => ({ value: `end-${p}`, partition: p }))
  await producer.send({ topic: s.topic, acks: -1, messages: ends })
  await producer.disconnect()

  const consumer = kafka.consumer({ groupId: `kafkajs-group-${process.pid}-${Date.now()}`, readUncommitted: false })
  await consumer.connect()
  await consumer.subscribe({ topics: [s.topic], fromBeginning: true })
  const consumed = result.consumed = []
  const seenEnd = new Set()
  await new Promise((resolve, reject) => {
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        const value = message.value.toString()
        consumed.push({ partition, offset: Number(message.offset), value })
        if (value.startsWith('end-')) seenEnd.add(partition)
        if (seenEnd.size === PARTITIONS) resolve()
      }
    }).catch(reject)
  })
  await consumer.disconnect()
  result.offsets = await admin.fetchTopicOffsets(s.topic)
  await admin.disconnect()
  return result
}

const progress = {} // what is known so far, on stderr if it times out
const timer = setTimeout(() => {
  process.stderr.write(`kafkajs_check: timed out after ${TIMEOUT_MS} ms; so far: ${JSON.stringify(progress)}\n`)
  process.exit(2)
}, TIMEOUT_MS)

main().then(result => {
  clearTimeout(timer)
  process.stdout.write(JSON.stringify(result) + '\n')
  process.exit(0)
}, err => {
  process.stderr.write(`kafkajs_check failed: ${err && err.stack ? err.stack : err}\n`)
  if (err && err.cause) process.stderr.write(`cause: ${err.cause.stack || err.cause}\n`)
  process.exit(1)
})
