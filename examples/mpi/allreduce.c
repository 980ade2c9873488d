/* MPI example: every rank contributes its rank; rank 0 checks the sum.
 * Build: mpicc -O2 -o allreduce allreduce.c */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int rank, size, sum = 0;
    char host[256];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof host);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d/%d on %s\n", rank, size, host);
    if (rank == 0) printf("allreduce sum=%d expected=%d\n", sum, size * (size - 1) / 2);
    MPI_Finalize();
    return sum == size * (size - 1) / 2 ? 0 : 1;
}
