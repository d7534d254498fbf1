// An OAuth 2.1 authorization server for the client library's tests, built on
// oidc-provider (a certified OpenID Provider): RFC 8414 / OpenID discovery, RFC 7591
// dynamic registration, PKCE S256, RFC 8707 resource indicators with JWT access tokens
// for the resource, refresh tokens, and RFC 9207 `iss` in authorization responses.
//
// The only thing made up is the user: every login is "alice" and every consent is given,
// so a test's user agent (a cookie-keeping HTTP client standing in for the browser) can
// go through the real redirects, cookies and interaction pages without a person.
//
//   node server.mjs            # prints "issuer=http://127.0.0.1:PORT" once listening
//
// Environment: OAUTH_AS_SCOPES (resource scopes, default "tasks:read tasks:write"),
// OAUTH_AS_MACHINE_CLIENT ("id:secret" of a pre-registered client_credentials client),
// OAUTH_AS_TENANT (the `tenant` claim of access tokens, default "acme"),
// OAUTH_AS_ACCESS_TTL (seconds, default 3600), OAUTH_AS_REVOCATION ("off": no RFC 7009
// revocation endpoint, so signing out leaves refresh tokens valid). Refresh tokens of public clients are
// rotated on use, and a spent one used again revokes its grant (oidc-provider's defaults).
import { createServer } from 'node:http';
import { generateKeyPair, exportJWK } from 'jose';
import Provider from 'oidc-provider';

const resourceScopes = process.env.OAUTH_AS_SCOPES || 'tasks:read tasks:write';
const tenant = process.env.OAUTH_AS_TENANT || 'acme';
const accessTtl = Number(process.env.OAUTH_AS_ACCESS_TTL || 3600);
const machine = process.env.OAUTH_AS_MACHINE_CLIENT?.split(':');
const revocation = process.env.OAUTH_AS_REVOCATION !== 'off';
const clients = machine
  ? [{
      client_id: machine[0],
      client_secret: machine[1],
      grant_types: ['client_credentials'],
      redirect_uris: [],
      response_types: [],
      token_endpoint_auth_method: 'client_secret_basic',
    }]
  : [];

const { privateKey } = await generateKeyPair('ES256', { extractable: true });
const signing = { ...(await exportJWK(privateKey)), alg: 'ES256', use: 'sig', kid: 'test-es256' };

const server = createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  jwks: { keys: [signing] },
  clientDefaults: { id_token_signed_response_alg: 'ES256' },
  clients,
  scopes: ['openid', 'offline_access', ...resourceScopes.split(' ')],
  findAccount: (ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    clientCredentials: { enabled: true },
    // RFC 7009: the console revokes its refresh token when it signs out.
    revocation: { enabled: revocation },
    resourceIndicators: {
      enabled: true,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource) => ({
        scope: resourceScopes,
        audience: resource,
        accessTokenTTL: accessTtl,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: 'ES256' } },
      }),
    },
  },
  extraTokenClaims: (ctx, token) =>
    token.kind === 'ClientCredentials' ? { tenant, sub: token.clientId } : { tenant },
  // A client registered for refresh_token gets one, without OIDC's offline_access dance.
  issueRefreshToken: (ctx, client) => client.grantTypeAllowed('refresh_token'),
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  cookies: { keys: ['a-test-cookie-signing-key-that-is-long-enough'] },
  ttl: { AccessToken: accessTtl },
});
provider.proxy = false;

// RFC 6749 §3.3: a request without `scope` gets the server's default, the resource's
// scopes (oidc-provider would otherwise grant nothing and refuse).
provider.use(async (ctx, next) => {
  if (ctx.path === '/auth' && ctx.method === 'GET' && !ctx.query.scope) {
    ctx.querystring = new URLSearchParams({ ...ctx.query, scope: resourceScopes }).toString();
  }
  return next();
});

// The user: logs in as alice and grants whatever was asked.
provider.use(async (ctx, next) => {
  const match = ctx.path.match(/^\/interaction\/([^/]+)$/);
  if (!match || ctx.method !== 'GET') return next();
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  let result;
  if (details.prompt.name === 'login') {
    result = { login: { accountId: 'alice' } };
  } else {
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
    const missing = details.prompt.details;
    if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
    if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
    for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes || {})) {
      grant.addResourceScope(indicator, scopes.join(' '));
    }
    result = { consent: { grantId: await grant.save() } };
  }
  await provider.interactionFinished(ctx.req, ctx.res, result, { mergeWithLastSubmission: false });
});

// Refusals are printed (the tests show them when they fail).
for (const event of ['authorization.error', 'grant.error', 'registration_create.error', 'server_error']) {
  provider.on(event, (ctx, err) => console.error(`oidc-provider ${event}: ${err.message} ${err.error_description || ''}`));
}

server.on('request', provider.callback());
console.log(`issuer=${issuer}`);
