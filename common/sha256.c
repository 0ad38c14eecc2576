/* SHA-256 helpers (see sha256.h). */
#include "common/sha256.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>

static void to_hex(const unsigned char md[32], char hex[SHA256_HEX_LEN])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[64] = 0;
}

int sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_LEN])
{
    unsigned char md[32];
    unsigned int n = 0;
    if (EVP_Digest(data, len, md, &n, EVP_sha256(), NULL) != 1) {
        errno = EIO;
        return -1;
    }
    to_hex(md, hex);
    return 0;
}

int sha256_file_hex(const char *path, char hex[SHA256_HEX_LEN])
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
    unsigned char chunk[1 << 15];
    size_t n;
    while (ok && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        ok = EVP_DigestUpdate(ctx, chunk, n) == 1;
    if (ok && ferror(f)) ok = 0;
    unsigned char md[32];
    unsigned int mdlen = 0;
    if (ok) ok = EVP_DigestFinal_ex(ctx, md, &mdlen) == 1;
    EVP_MD_CTX_free(ctx);
    fclose(f);
    if (!ok) {
        errno = EIO;
        return -1;
    }
    to_hex(md, hex);
    return 0;
}
