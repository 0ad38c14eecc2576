/* cinfer-engine serve: placeholder until the HTTP server lands (being written now). */
#include "engine/cmd.h"

#include <stdio.h>

int cmd_serve_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "cinfer-engine serve: not built yet\n");
    return 1;
}
