/* Unit tests of discovery's pure pieces: the served model name of an InferenceService, equality
 * selectors (status.selector), and pods to endpoints (ready, terminating, IPv6, the "http" port). */
#include "router/router_discovery.h"

#include <check.h>
#include <jansson.h>

static json_t *parse(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    ck_assert_ptr_nonnull(j);
    return j;
}

START_TEST(test_router_discovery_model_name)
{
    json_t *a = parse("{\"metadata\":{\"name\":\"svc\"},\"spec\":{\"model\":{\"uri\":\"x\"}}}");
    json_t *b = parse("{\"metadata\":{\"name\":\"svc\"},\"spec\":{\"model\":{\"servedName\":"
                      "\"llama-8b\"}}}");
    json_t *c = parse("{\"spec\":{}}");
    ck_assert_str_eq(router_discovery_model_name(a), "svc");
    ck_assert_str_eq(router_discovery_model_name(b), "llama-8b");
    ck_assert_ptr_null(router_discovery_model_name(c));
    json_decref(a);
    json_decref(b);
    json_decref(c);
}
END_TEST

START_TEST(test_router_discovery_selector)
{
    json_t *s = router_discovery_selector(
        "app.kubernetes.io/name=cinfer-engine,serving.cinfer.io/inferenceservice==a");
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(json_string_value(json_object_get(s, "app.kubernetes.io/name")),
                     "cinfer-engine");
    ck_assert_str_eq(json_string_value(json_object_get(s, "serving.cinfer.io/inferenceservice")),
                     "a");
    json_decref(s);
    ck_assert_ptr_null(router_discovery_selector("a!=b"));
    ck_assert_ptr_null(router_discovery_selector("a in (b,c)"));
    ck_assert_ptr_null(router_discovery_selector("=b"));
    ck_assert_ptr_null(router_discovery_selector("a"));
    s = router_discovery_selector("");
    ck_assert_uint_eq(json_object_size(s), 0);
    json_decref(s);
}
END_TEST

START_TEST(test_router_discovery_endpoint)
{
    struct router_endpoint ep;
    json_t *ready;
    ready = parse("{\"metadata\":{\"name\":\"p1\"},\"spec\":{\"containers\":[{\"ports\":[{\"name\":"
                  "\"metrics\",\"containerPort\":9},{\"name\":\"http\",\"containerPort\":8123}]}]},"
                  "\"status\":{\"phase\":\"Running\",\"podIP\":\"10.0.0.7\",\"conditions\":[{"
                  "\"type\":\"Ready\",\"status\":\"True\"}]}}");
    ck_assert(router_discovery_endpoint(ready, &ep));
    ck_assert_str_eq(ep.key, "p1");
    ck_assert_str_eq(ep.url, "http://10.0.0.7:8123");
    ck_assert(ep.ready && !ep.terminating);
    json_decref(ready);

    json_t *v6 =
        parse("{\"metadata\":{\"name\":\"p2\",\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"},"
              "\"status\":{\"phase\":\"Running\",\"podIP\":\"fd00::7\",\"conditions\":[{"
              "\"type\":\"Ready\",\"status\":\"True\"}]}}");
    ck_assert(router_discovery_endpoint(v6, &ep));
    ck_assert_str_eq(ep.url, "http://[fd00::7]:8000");
    ck_assert(ep.terminating);
    json_decref(v6);

    json_t *starting = parse("{\"metadata\":{\"name\":\"p3\"},\"status\":{\"phase\":\"Running\","
                             "\"podIP\":\"10.0.0.8\",\"conditions\":[{\"type\":\"Ready\","
                             "\"status\":\"False\"}]}}");
    ck_assert(router_discovery_endpoint(starting, &ep));
    ck_assert(!ep.ready);
    json_decref(starting);

    json_t *pending = parse("{\"metadata\":{\"name\":\"p4\"},\"status\":{\"phase\":\"Pending\"}}");
    ck_assert(!router_discovery_endpoint(pending, &ep));
    json_decref(pending);
}
END_TEST

Suite *router_discovery_suite(void)
{
    Suite *s = suite_create("router_discovery");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_router_discovery_model_name);
    tcase_add_test(tc, test_router_discovery_selector);
    tcase_add_test(tc, test_router_discovery_endpoint);
    suite_add_tcase(s, tc);
    return s;
}
