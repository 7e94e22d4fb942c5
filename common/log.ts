import { pino, type Logger, type LoggerOptions } from 'pino';

export type { Logger } from 'pino';

/** Field names whose values never reach a log line (webhook URLs, tokens, secrets). */
export const REDACTED_LOG_PATHS = [
  'token', '*.token', 'authorization', '*.authorization', 'headers.authorization',
  'webhook', '*.webhook', 'webhookUrl', '*.webhookUrl', 'slackWebhook', '*.slackWebhook',
  'secret', '*.secret', 'password', '*.password', 'url', '*.url',
];

/**
 * The one way library code gets a logger: structured JSON on stderr (stdout is kept for
 * command output such as `bundle -o -` and `status --json`).
 */
export function createLogger(opts: { level?: string; name?: string; destination?: NodeJS.WritableStream } = {}): Logger {
  const options: LoggerOptions = {
    level: opts.level ?? process.env.PULLWATCH_LOG_LEVEL ?? 'info',
    base: { name: opts.name ?? 'pullwatch' },
    redact: { paths: REDACTED_LOG_PATHS, censor: '[redacted]' },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return pino(options, (opts.destination ?? process.stderr) as pino.DestinationStream);
}

/** A logger that drops everything (unit tests, benchmarks). */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
