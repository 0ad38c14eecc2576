/* `cinfer-autoscaler simulate`: replays a request trace through the simulator (sim.h) under one
 * scaling policy and prints a summary plus one JSON line. */
#ifndef CINFER_AUTOSCALER_CMD_SIMULATE_H
#define CINFER_AUTOSCALER_CMD_SIMULATE_H

/* argv[0] is the subcommand name ("simulate"); flags follow (see --help). Returns the process exit
 * status: 0, 1 on a failed run, 2 on bad usage. Main thread only (it sets up logging). */
int cmd_simulate_main(int argc, char **argv);

#endif
